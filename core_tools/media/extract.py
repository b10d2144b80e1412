"""Text out of the files users send: PDF (pypdf), DOCX (python-docx), and text formats as they are."""

from __future__ import annotations

import csv
import io
import logging
from dataclasses import dataclass
from pathlib import PurePath

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


def _pdf(data: bytes) -> Extracted:
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise MediaError("the PDF is encrypted (password-protected); please send an unlocked copy")
        pages = [page.extract_text() or "" for page in reader.pages]
        titles = [str(getattr(item, "title", "")) for item in reader.outline if not isinstance(item, list)]
    except MediaError:
        raise
    except FileNotDecryptedError as exc:
        raise MediaError("the PDF is encrypted (password-protected); please send an unlocked copy") from exc
    except (PdfReadError, ValueError, KeyError, TypeError, OSError, IndexError, AttributeError) as exc:
        raise MediaError(f"the PDF could not be read: it seems broken ({type(exc).__name__})") from exc
    text = "\n\n".join(f"--- page {i} ---\n{t.strip()}" for i, t in enumerate(pages, 1))
    outline = f"{len(pages)} pages"
    if titles:
        outline += "; sections: " + "; ".join(t for t in titles[:20] if t)
    if not any(t.strip() for t in pages):
        outline += "; no text layer (a scan?): only images, which I cannot read from a PDF"
    return Extracted("PDF", text, outline)


def _docx(data: bytes) -> Extracted:
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    try:
        document = docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, ValueError, KeyError, OSError) as exc:
        raise MediaError(f"the DOCX could not be read: it seems broken ({type(exc).__name__})") from exc
    except Exception as exc:  # zipfile.BadZipFile, lxml errors: a damaged file either way
        raise MediaError(f"the DOCX could not be read: it seems broken ({type(exc).__name__})") from exc
    lines: list[str] = []
    headings: list[str] = []
    for para in document.paragraphs:
        style = para.style.name if para.style is not None else ""
        if style.startswith("Heading") and para.text.strip():
            headings.append(para.text.strip())
            lines.append(f"# {para.text.strip()}")
        else:
            lines.append(para.text)
    for table in document.tables:
        for row in table.rows:
            lines.append(" | ".join(cell.text.strip() for cell in row.cells))
    outline = f"{len(document.paragraphs)} paragraphs, {len(document.tables)} tables"
    if headings:
        outline += "; headings: " + "; ".join(headings[:20])
    return Extracted("DOCX", "\n".join(lines).strip(), outline)


def _decode(data: bytes, name: str) -> str:
    if b"\x00" in data[:8192]:
        raise MediaError(f"{name!r} is a binary file I cannot read; I read {SUPPORTED}")
    for encoding in ("utf-8-sig", "utf-16") if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ("utf-8-sig",):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return data.decode("latin-1")  # every byte is a character: text in an old 8-bit encoding stays readable


def _table(text: str, kind: str) -> Extracted:
    delimiter = "\t" if kind == "TSV" else ","
    try:
        sample = text[:65536]
        if kind == "CSV":
            delimiter = csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter
    except csv.Error:
        pass
    rows = text.count("\n") + (0 if text.endswith("\n") else 1)
    header = next(csv.reader(io.StringIO(text), delimiter=delimiter), [])
    outline = f"{max(0, rows - 1)} data rows; columns: {', '.join(header[:40])}"
    return Extracted(kind, text, outline)


def extract(name: str, mime_type: str | None, data: bytes) -> Extracted:
    """The text of a file, or MediaError saying why it cannot be read (and what can)."""
    ext = extension(name)
    mime = (mime_type or "").lower()
    if ext == "pdf" or mime == "application/pdf" or data[:5] == b"%PDF-":
        return _pdf(data)
    if ext == "docx" or mime.endswith("wordprocessingml.document"):
        return _docx(data)
    if ext in ("csv", "tsv") or mime in ("text/csv", "text/tab-separated-values"):
        return _table(_decode(data, name), "TSV" if ext == "tsv" or "tab" in mime else "CSV")
    if ext in TEXT_EXTENSIONS or mime.startswith("text/") or mime in ("application/json", "application/xml"):
        text = _decode(data, name)
        kind = "JSON" if ext == "json" or mime == "application/json" else "text"
        lines = text.count("\n") + 1
        headings = [line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#")]
        outline = f"{lines} lines"
        if ext in ("md", "markdown") and headings:
            outline += "; headings: " + "; ".join(headings[:20])
        return Extracted(kind, text, outline)
    shown = f".{ext}" if ext and "." in name else (mime or "unknown type")
    raise MediaError(f"I cannot read this kind of file ({shown}); I read {SUPPORTED}")
