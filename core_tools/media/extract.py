"""Text out of the files users send: PDF (pypdf), DOCX (python-docx), and text formats as they are."""

from __future__ import annotations

import csv
import io
import logging
import zipfile
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from core_tools.errors import MediaError

log = logging.getLogger(__name__)

TEXT_EXTENSIONS = frozenset(
    [
        "txt",
        "md",
        "markdown",
        "rst",
        "csv",
        "tsv",
        "json",
        "jsonl",
        "ndjson",
        "yaml",
        "yml",
        "toml",
        "ini",
        "cfg",
        "conf",
        "log",
        "xml",
        "html",
        "htm",
        "css",
        "sql",
        "py",
        "js",
        "mjs",
        "ts",
        "tsx",
        "jsx",
        "java",
        "kt",
        "c",
        "h",
        "cc",
        "cpp",
        "hpp",
        "cs",
        "go",
        "rs",
        "rb",
        "php",
        "sh",
        "bash",
        "zsh",
        "ps1",
        "r",
        "lua",
        "pl",
        "swift",
        "scala",
        "tex",
        "ipynb",
        "env",
        "properties",
        "gradle",
        "dockerfile",
        "makefile",
    ]
)
SUPPORTED = "PDF, DOCX, plain text, Markdown, CSV/TSV, JSON and source code files (and images as photos)"


MAX_TEXT_CHARS = 1_000_000  # the text kept of one file; the rest is cut (FILE_MAX_TEXT_CHARS)
MAX_UNPACKED_BYTES = 128 * 1024 * 1024  # a DOCX's parts, unpacked, at most (a zip bomb is refused unread)
MAX_PARTS = 2_000  # parts in a DOCX: python-docx loads every one of them
SNIFF_LINES = 20  # lines of a CSV looked at to find its delimiter
SNIFF_CHARS = 65_536
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"  # WordprocessingML, in lxml's tags
_BREAKS = (_W + "br", _W + "cr")
_STYLE_PATH = f"{_W}pPr/{_W}pStyle"


@dataclass(frozen=True)
class Extracted:
    """The text of a file and what the model is told about its shape."""

    kind: str  # PDF | DOCX | CSV | TSV | JSON | text
    text: str
    outline: str  # a short description: pages, headings, columns


def extension(name: str) -> str:
    """The lower-case extension of a file name without the dot ("" when none)."""
    suffix = PurePath(name).suffix.lower().lstrip(".")
    return suffix or PurePath(name).name.lower()


def _cut_note(max_chars: int) -> str:
    return f"; text cut at {max_chars} characters (the rest of the file is not read)"


def _pdf(data: bytes, max_chars: int) -> Extracted:
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    pages: list[str] = []
    chars = 0
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise MediaError("the PDF is encrypted (password-protected); please send an unlocked copy")
        total = len(reader.pages)
        # Page by page, until the text passes the cap: pages may share one content stream, so a small
        # file can hold far more text than its size suggests.
        for page in reader.pages:
            if chars >= max_chars:
                break
            text = (page.extract_text() or "")[: max_chars - chars + 1]
            pages.append(text)
            chars += len(text)
        titles = [
            str(getattr(item, "title", "")) for item in reader.outline[:40] if not isinstance(item, list)
        ]
    except MediaError:
        raise
    except FileNotDecryptedError as exc:
        raise MediaError("the PDF is encrypted (password-protected); please send an unlocked copy") from exc
    except (PdfReadError, ValueError, KeyError, TypeError, OSError, IndexError, AttributeError) as exc:
        raise MediaError(f"the PDF could not be read: it seems broken ({type(exc).__name__})") from exc
    text = "\n\n".join(f"--- page {i} ---\n{t.strip()}" for i, t in enumerate(pages, 1))
    outline = f"{total} pages"
    if titles:
        outline += "; sections: " + "; ".join(t for t in titles[:20] if t)
    if not any(t.strip() for t in pages):
        outline += "; no text layer (a scan?): only images, which I cannot read from a PDF"
    if len(text) > max_chars or len(pages) < total:
        text = text[:max_chars]
        outline += _cut_note(max_chars) + f"; read up to page {len(pages)}"
    return Extracted("PDF", text, outline)


def _check_zip(data: bytes, max_unpacked: int) -> None:
    """Refuse a zip (a DOCX) whose parts unpack to more than `max_unpacked` bytes, before any is read.

    The sizes are those the archive declares; zipfile never inflates a member past its declared size."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise MediaError(f"the DOCX could not be read: it seems broken ({type(exc).__name__})") from exc
    unpacked = sum(m.file_size for m in members)
    if unpacked > max_unpacked:
        raise MediaError(
            f"it could not be read: too large when unpacked ({unpacked / 1024 / 1024:.0f} MB from a "
            f"{len(data) / 1024:.0f} KB file; I unpack at most {max_unpacked // 1024 // 1024} MB)"
        )
    if len(members) > MAX_PARTS:
        raise MediaError(f"it could not be read: it has {len(members)} parts, more than {MAX_PARTS}")


def _paragraph_text(paragraph: Any) -> str:
    """A paragraph's text as Word shows it: its runs' text, tabs and breaks.

    By hand with lxml's iter() rather than python-docx's Paragraph.text, which runs an XPath query per
    paragraph: minutes for a small file of a million paragraphs."""
    parts: list[str] = []
    for run in paragraph.iter(_W + "r"):
        for item in run:
            tag = item.tag
            if tag == _W + "t":
                parts.append(item.text or "")
            elif tag == _W + "tab":
                parts.append("\t")
            elif tag in _BREAKS:
                parts.append("\n")
    return "".join(parts)


def _docx(data: bytes, max_chars: int, max_unpacked: int) -> Extracted:
    import docx
    from docx.enum.style import WD_STYLE_TYPE
    from docx.oxml.table import CT_Tbl
    from docx.oxml.text.paragraph import CT_P
    from docx.table import Table
    from lxml import etree

    _check_zip(data, max_unpacked)
    try:
        document = docx.Document(io.BytesIO(data))
        # Style names looked up once: python-docx resolves a paragraph's style anew on every `.style`.
        names = {s.style_id: s.name or "" for s in document.styles}
        default = document.styles.default(WD_STYLE_TYPE.PARAGRAPH)
        default_name = default.name or "" if default is not None else ""
    except (MediaError, MemoryError):
        raise
    except etree.XMLSyntaxError as exc:
        if exc.code == etree.ErrorTypes.ERR_NO_MEMORY:  # libxml2 out of memory: the worker's limit
            raise MemoryError(str(exc)) from exc
        raise MediaError(f"the DOCX could not be read: it seems broken ({type(exc).__name__})") from exc
    except Exception as exc:  # zipfile.BadZipFile, other lxml errors, missing parts: a damaged file
        raise MediaError(f"the DOCX could not be read: it seems broken ({type(exc).__name__})") from exc
    lines: list[str] = []
    headings: list[str] = []
    paragraphs = tables = chars = 0
    cut = False
    for child in document.element.body.iterchildren():
        if chars > max_chars:
            cut = True
            break
        if isinstance(child, CT_P):
            paragraphs += 1
            text = _paragraph_text(child)
            found = child.find(_STYLE_PATH)
            style_id = None if found is None else found.get(_W + "val")
            style = names.get(style_id, "") if style_id else default_name
            if style.startswith("Heading") and text.strip():
                headings.append(text.strip())
                text = f"# {text.strip()}"
            lines.append(text)
            chars += len(text) + 1
        elif isinstance(child, CT_Tbl):
            tables += 1
            for row in Table(child, document).rows:
                line = " | ".join(cell.text.strip() for cell in row.cells)
                lines.append(line)
                chars += len(line) + 1
                if chars > max_chars:
                    break
    outline = f"{paragraphs} paragraphs, {tables} tables"
    if headings:
        outline += "; headings: " + "; ".join(headings[:20])
    text = "\n".join(lines).strip()
    if cut or len(text) > max_chars:
        text = text[:max_chars]
        outline += _cut_note(max_chars)
    return Extracted("DOCX", text, outline)


def _decode(data: bytes, name: str) -> str:
    if b"\x00" in data[:8192]:
        raise MediaError(f"{name!r} is a binary file I cannot read; I read {SUPPORTED}")
    for encoding in ("utf-8-sig", "utf-16") if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ("utf-8-sig",):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return data.decode("latin-1")  # every byte is a character: text in an old 8-bit encoding stays readable


def _delimiter(sample: str) -> str:
    """The delimiter among , ; tab | that splits the first lines into the same number (over one) of fields.

    Not csv.Sniffer: its regular expressions backtrack for minutes on crafted input (`,"` repeated)."""
    lines = sample[:SNIFF_CHARS].splitlines()[:SNIFF_LINES]
    best, best_score = ",", (0, 0)
    for candidate in ",;\t|":
        try:
            widths = [len(row) for row in csv.reader(lines, delimiter=candidate)]
        except csv.Error:
            continue
        common = max(set(widths), key=widths.count, default=0)
        score = (widths.count(common), common)
        if common > 1 and score > best_score:
            best, best_score = candidate, score
    return best


def _text(text: str, max_chars: int) -> tuple[str, str]:
    """The text within the cap, and the note for the outline when it was cut."""
    if len(text) <= max_chars:
        return text, ""
    return text[:max_chars], _cut_note(max_chars)


def _table(text: str, kind: str, max_chars: int) -> Extracted:
    delimiter = "\t" if kind == "TSV" else _delimiter(text)
    rows = text.count("\n") + (0 if text.endswith("\n") else 1)
    text, cut = _text(text, max_chars)
    try:  # the first record, of at most max_chars (csv's field size limit stops a quote that never closes)
        header = next(csv.reader(io.StringIO(text), delimiter=delimiter), [])
        columns = "columns: " + ", ".join(name[:60] for name in header[:40])
    except csv.Error:  # the text is still the text
        columns = "its columns could not be told apart (a quote is not closed?)"
    return Extracted(kind, text, f"{max(0, rows - 1)} data rows; {columns}{cut}")


def extract(
    name: str,
    mime_type: str | None,
    data: bytes,
    *,
    max_chars: int = MAX_TEXT_CHARS,
    max_unpacked: int = MAX_UNPACKED_BYTES,
) -> Extracted:
    """The text of a file (at most `max_chars` of it), or MediaError saying why it cannot be read.

    Runs in the reading worker (core_tools.media.worker), which bounds its time and memory."""
    ext = extension(name)
    mime = (mime_type or "").lower()
    if ext == "pdf" or mime == "application/pdf" or data[:5] == b"%PDF-":
        return _pdf(data, max_chars)
    if ext == "docx" or mime.endswith("wordprocessingml.document"):
        return _docx(data, max_chars, max_unpacked)
    if ext in ("csv", "tsv") or mime in ("text/csv", "text/tab-separated-values"):
        return _table(_decode(data, name), "TSV" if ext == "tsv" or "tab" in mime else "CSV", max_chars)
    if ext in TEXT_EXTENSIONS or mime.startswith("text/") or mime in ("application/json", "application/xml"):
        text, cut = _text(_decode(data, name), max_chars)
        kind = "JSON" if ext == "json" or mime == "application/json" else "text"
        lines = text.count("\n") + 1
        headings = [line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#")]
        outline = f"{lines} lines"
        if ext in ("md", "markdown") and headings:
            outline += "; headings: " + "; ".join(headings[:20])
        return Extracted(kind, text, outline + cut)
    shown = f".{ext}" if ext and "." in name else (mime or "unknown type")
    raise MediaError(f"I cannot read this kind of file ({shown}); I read {SUPPORTED}")
