"""Real files for the media tests: WAV (standard library), PDF (fpdf2), DOCX (python-docx), PNG (Pillow)."""

from __future__ import annotations

import io
import math
import struct
import wave
from typing import Any

from sqlalchemy import select

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


def rows(h: Any, model: type) -> list[Any]:
    """Every row of a table of the running bot's database."""
    with h.services.engine.connect() as conn:
        return list(conn.execute(select(model)).mappings())


def user_content(request: dict[str, Any]) -> Any:
    """The content of the last user message of a chat request."""
    return [m for m in request["messages"] if m["role"] == "user"][-1]["content"]
