"""Real files for the media tests: WAV (standard library), PDF (fpdf2), DOCX (python-docx), PNG (Pillow)."""

from __future__ import annotations

import io
import math
import struct
import wave
from typing import Any

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def make_wav(seconds: float = 1.0, rate: int = 16000) -> bytes:
    """A mono 16-bit WAV of a 440 Hz tone."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        frames = b"".join(
            struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * i / rate)))
            for i in range(int(seconds * rate))
        )
        out.writeframes(frames)
    return buffer.getvalue()


def make_pdf(pages: list[str]) -> bytes:
    """A PDF with one page per text, written by fpdf2."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 6, text)
    return bytes(pdf.output())


def make_encrypted_pdf(text: str, password: str = "secret") -> bytes:
    """A password-protected PDF (pypdf's writer)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf([text]))))
    writer.encrypt(user_password=password, owner_password=password)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def make_docx(heading: str, paragraphs: list[str]) -> bytes:
    """A DOCX with a heading and paragraphs, written by python-docx."""
    import docx

    document = docx.Document()
    document.add_heading(heading, level=1)
    for text in paragraphs:
        document.add_paragraph(text)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def make_png(color: tuple[int, int, int] = (200, 30, 30), size: tuple[int, int] = (32, 24)) -> bytes:
    """A small PNG (Pillow)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def user_content(request: dict[str, Any]) -> Any:
    """The content of the last user message of a chat request."""
    return [m for m in request["messages"] if m["role"] == "user"][-1]["content"]


def _with_body(chunk: bytes, count: int, start: bytes = b"", end: bytes = b"") -> bytes:
    """A python-docx DOCX whose document body is `start`, `count` times `chunk`, then `end`: streamed into
    its deflated member, so that a body of hundreds of MB never sits in memory."""
    import zipfile

    source = zipfile.ZipFile(io.BytesIO(make_docx("x", ["placeholder"])))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename != "word/document.xml":
                archive.writestr(info.filename, data)
                continue
            head, rest = data.split(b"<w:body>", 1)
            tail = b"<w:sectPr" + rest.split(b"<w:sectPr", 1)[1]
            member = zipfile.ZipInfo(info.filename)
            member.compress_type = zipfile.ZIP_DEFLATED
            with archive.open(member, "w", force_zip64=True) as stream:
                stream.write(head + b"<w:body>" + start)
                for _ in range(count):
                    stream.write(chunk)
                stream.write(end + tail)
    return out.getvalue()


def make_zip_bomb_docx(unpacked_mb: int = 400) -> bytes:
    """A DOCX of a few hundred KB whose document part inflates to `unpacked_mb` MB (one long text run)."""
    return _with_body(b"A" * (1 << 20), unpacked_mb, b"<w:p><w:r><w:t>", b"</w:t></w:r></w:p>")


def make_paragraphs_docx(count: int, paragraph: bytes = b"<w:p/>") -> bytes:
    """A DOCX of `count` copies of one paragraph (300,000 empty ones zip to about 30 KB)."""
    return _with_body(paragraph, count)


def make_shared_stream_pdf(pages: int = 20, chars: int = 1_000_000) -> bytes:
    """A PDF of a few KB whose pages all show one content stream of `chars` characters of text.

    Written by hand: no PDF writer shares one stream between pages."""
    import zlib

    line = b"(" + b"A" * 200 + b") Tj T* "
    content = zlib.compress(b"BT /F1 1 Tf 12 TL 0 0 Td " + line * (chars // 200) + b"ET", 9)
    kids = b" ".join(b"%d 0 R" % (5 + i) for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(content) + content + b"\nendstream",
    ]
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>"
    )
    objects += [page] * pages
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def peak_rss_reset() -> int:
    """Reset this process's peak resident memory (Linux clear_refs) and return the current one, in bytes."""
    from pathlib import Path

    Path("/proc/self/clear_refs").write_text("5")
    return _status_kb("VmRSS") * 1024


def peak_rss() -> int:
    """This process's peak resident memory since the last reset, in bytes."""
    return _status_kb("VmHWM") * 1024


def _status_kb(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(field)


def make_ogg_opus(seconds: int, header_seconds: float | None = None) -> bytes:
    """An OGG/Opus voice note of `seconds` of audio in 20 ms packets (valid pages, written by mutagen).

    Its pages' granule positions, which players and header readers show as its length, say
    `header_seconds` (default: the truth). The packets are 20 ms CELT frames of silence-like bytes."""
    from mutagen.ogg import OggPage

    pre_skip = 312
    head = b"OpusHead" + bytes([1, 1]) + struct.pack("<HIhB", pre_skip, 48000, 0, 0)
    tags = b"OpusTags" + struct.pack("<I", 4) + b"test" + struct.pack("<I", 0)
    claimed = None if header_seconds is None else round(header_seconds * 48000)
    pages: list[Any] = []
    for packets, samples in [([head], 0), ([tags], 0)] + [
        ([b"\xf8\xff\xfe"] * 50, 48000 * (n + 1)) for n in range(seconds)
    ]:
        page = OggPage()
        page.packets = packets
        page.serial = 0x5EC
        page.sequence = len(pages)
        page.position = pre_skip + (samples if claimed is None else min(samples, claimed))
        pages.append(page)
    pages[0].first = True
    pages[-1].last = True
    return b"".join(page.write() for page in pages)
