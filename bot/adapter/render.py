"""Markdown from the model -> Telegram text + entities, split without breaking code blocks."""

from __future__ import annotations

import re
from dataclasses import dataclass

import telegramify_markdown
from telegram import MessageEntity

TELEGRAM_LIMIT = 4096  # UTF-16 code units per message
SOURCE_CHUNK = 4000  # split the Markdown source a little below the limit: rendering only shortens it

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


def utf16_len(text: str) -> int:
    """Length as Telegram counts it."""
    return len(text.encode("utf-16-le")) // 2


@dataclass(frozen=True)
class Rendered:
    """One Telegram message: plain text plus formatting entities."""

    text: str
    entities: tuple[MessageEntity, ...]


def _escape_angles(line: str) -> str:
    """Keep `<tag>` text visible: the converter takes it for HTML and drops it (docs/design-notes.md)."""
    out, last = [], 0
    for m in _CODE_SPAN.finditer(line):
        out.append(line[last : m.start()].replace("<", "\\<"))
        out.append(m.group(0))
        last = m.end()
    out.append(line[last:].replace("<", "\\<"))
    return "".join(out)


def _escape(markdown: str) -> str:
    lines, fence = [], None
    for line in markdown.split("\n"):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
        elif fence is not None and m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
            fence = None
        elif fence is None:
            line = _escape_angles(line)
        lines.append(line)
    return "\n".join(lines)


def split_markdown(markdown: str, limit: int = SOURCE_CHUNK) -> list[str]:
    """Split Markdown into chunks of at most `limit` characters; a code block cut in two is reopened."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    fence_line: str | None = None  # the opening line of the code block we are inside
    fence_marker = ""  # its ``` or ~~~ run

    def flush() -> None:
        nonlocal current, size
        if fence_line is not None:
            current.append(fence_marker)
        text = "\n".join(current).strip("\n")
        if text.strip():
            chunks.append(text)
        current = [fence_line] if fence_line is not None else []
        size = len(fence_line) + 1 if fence_line is not None else 0

    room = limit - 8  # space kept for a closing fence
    for line in markdown.split("\n"):
        pieces = [line[i : i + room] for i in range(0, len(line), room)] or [""]
        for piece in pieces:
            if size + len(piece) + 1 > room and current:
                flush()
            current.append(piece)
            size += len(piece) + 1
        m = _FENCE.match(line)
        if m and fence_line is None:
            fence_line, fence_marker = line, m.group(1)
        elif m and m.group(1)[0] == fence_marker[0] and len(m.group(1)) >= len(fence_marker):
            fence_line = None
    fence_line = None  # an unclosed block at the end stays as the model wrote it
    flush()
    return chunks


def _entities(raw: list[telegramify_markdown.MessageEntity]) -> tuple[MessageEntity, ...]:
    return tuple(
        MessageEntity(
            type=e.type,
            offset=e.offset,
            length=e.length,
            url=e.url,
            language=e.language,
            custom_emoji_id=e.custom_emoji_id,
        )
        for e in raw
        if e.length > 0
    )


def render(markdown: str) -> list[Rendered]:
    """Render the model's Markdown into Telegram messages of at most 4096 characters each."""
    out: list[Rendered] = []
    for chunk in split_markdown(markdown):
        try:
            text, raw = telegramify_markdown.convert(_escape(chunk))
        except Exception:  # a converter bug must not lose the answer: send the source as it is
            text, raw = chunk, []
        if utf16_len(text) > TELEGRAM_LIMIT:
            parts = telegramify_markdown.split_entities(text, raw, TELEGRAM_LIMIT)
        else:
            parts = [(text, raw)]
        for part_text, part_raw in parts:
            if part_text.strip():
                out.append(Rendered(part_text, _entities(part_raw)))
    return out


def split_rendered(part: Rendered, limit: int) -> list[Rendered]:
    """Split one message into pieces of at most `limit` UTF-16 units, at line ends where possible.

    For a message Telegram refused as too long although it fits by our count: resent in smaller pieces,
    the formatting entities clipped to each piece.
    """
    raw = [
        telegramify_markdown.MessageEntity(
            type=e.type,
            offset=e.offset,
            length=e.length,
            url=e.url,
            language=e.language,
            custom_emoji_id=e.custom_emoji_id,
        )
        for e in part.entities
    ]
    pieces = telegramify_markdown.split_entities(part.text, raw, max(limit, 2))
    return [Rendered(text, _entities(ents)) for text, ents in pieces]


def plain_chunks(text: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Split plain text into message-sized pieces (the fallback when formatting is rejected)."""
    out, current = [], ""
    for line in text.split("\n"):
        while utf16_len(line) > limit:
            out.append(line[: limit // 2])
            line = line[limit // 2 :]
        if utf16_len(current) + utf16_len(line) + 1 > limit and current:
            out.append(current)
            current = ""
        current = f"{current}\n{line}" if current else line
    if current.strip():
        out.append(current)
    return out
