"""A loopback fake of the Telegram Bot API that the real python-telegram-bot client talks to over HTTP.

Usage::

    async with FakeTelegram(token="123:ABC") as tg:
        bot = telegram.Bot("123:ABC", base_url=tg.base_url, base_file_url=tg.base_file_url)
        tg.push_text(42, "/start hello")
        ...
        calls = await tg.wait_for_call("sendMessage", chat_id=42)
        assert tg.sent_texts(42) == ["Hi!"]

Notes on fidelity:

* Parameters arrive form-urlencoded (or multipart for uploads) with complex values JSON-encoded, exactly as
  PTB sends them; JSON bodies are accepted too. Values are decoded into ``Call.params`` (``chat_id`` -> int,
  ``entities`` -> list of dicts, ...), except for free-text parameters such as ``text`` and ``caption``.
* ``parse_mode`` is not rendered: the text is stored as sent. ``MarkdownV2`` text is, however, checked for
  unescaped reserved characters the way Telegram rejects them (400 ``can't parse entities``).
* The length limit (4096 for texts, 1024 for captions) is Telegram's: UTF-16 code units of the text *after*
  parse_mode parsing (HTML tags and entities, Markdown markup and escapes removed), answered with Telegram's
  exact 400 ``Bad Request: message is too long``. An astral-plane emoji counts 2. ``message_limit`` lowers
  that limit (a Bot API that counts some text longer than the bot does) for sends and edits alike.
* With ``strict_entities=True`` (the default) entities pointing outside the text (in UTF-16 code units) are
  rejected with 400 ``can't parse entities``; real Telegram may be more lenient, but such entities are bugs.
* ``messages[chat_id]`` holds only the messages the bot sent (what the user sees from the bot), with edits
  applied and deletions removed.
* Forum supergroups (``create_topic``): the chat has ``is_forum``; a user's message in a topic carries
  ``message_thread_id`` and ``is_topic_message``; one in the General topic carries neither. A reply in a
  supergroup outside a topic carries the ``message_thread_id`` of its thread of replies, without
  ``is_topic_message``, as Telegram sends it. A send or chat action with a ``message_thread_id`` that is not
  a topic of a forum (General's 1 included) is refused with 400 ``message thread not found``; a send into a
  topic (given, or inferred from the message it replies to) is a topic message. ``topic_texts`` shows what
  the bot sent in one topic.
* Command lists are kept per scope and language as ``setMyCommands`` sets them (an empty list removes one);
  ``commands_for`` answers which list a user sees in a chat, by the Bot API's documented order of scopes.
  Descriptions (``setMyDescription``, ``setMyShortDescription``) are kept per language; an empty or missing
  value removes one, as in the Bot API. Preset ``descriptions``/``short_descriptions`` to play an operator
  who set them in BotFather.
* ``setChatMenuButton`` keeps a menu button per chat, or the default of every private chat without
  ``chat_id``; a ``web_app`` button needs a text and an https:// URL, as in the Bot API.
  ``getChatMenuButton`` (and ``menu_button_for``) answers a chat's own button, else the default.
* Guest mode (Bot API 10.0): ``push_guest_message`` queues a ``guest_message`` update (a Message with a
  ``guest_query_id``, from a chat the bot need not be in); ``answerGuestQuery`` answers it once with one
  InlineQueryResult and returns a SentGuestMessage (``inline_message_id``). ``supports_guest_queries`` in
  getMe is False until a test sets ``guest_mode = True`` (the @BotFather switch). Inline mode:
  ``push_inline_query`` queues an ``inline_query``; ``answerInlineQuery`` answers it once (at most 50
  results, unique ids of at most 64 bytes); ``choose_inline_result`` plays the user picking a result: it is
  posted (an inline message when it has a keyboard) and, with ``inline_feedback``, a
  ``chosen_inline_result`` update follows. ``inline_messages`` holds what such messages show, with
  ``editMessageText`` by ``inline_message_id`` applied; ``push_inline_callback`` presses a button on one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any, Self

from aiohttp import web

__all__ = [
    "MAX_MESSAGE_LENGTH",
    "Call",
    "FakeTelegram",
    "TelegramError",
    "UploadedFile",
    "utf16_len",
]

MAX_MESSAGE_LENGTH = 4096
MAX_CAPTION_LENGTH = 1024

JsonDict = dict[str, Any]
ParamsPredicate = Callable[[JsonDict], bool]

# Parameters whose values are free text (or opaque ids) and must never be JSON-decoded.
_STRING_PARAMS = frozenset(
    {
        "text",
        "caption",
        "callback_query_id",
        "inline_query_id",
        "parse_mode",
        "url",
        "secret_token",
        "file_id",
        "title",
        "description",
        "short_description",
        "name",
        "query",
        "ip_address",
        "emoji",
        "action",
        "business_connection_id",
        "message_effect_id",
        "language_code",
        "inline_message_id",
        "guest_query_id",
        "start_parameter",
        "document",
        "photo",
        "audio",
        "video",
        "voice",
        "animation",
        "sticker",
        "thumbnail",
        "explanation",
        "question",
    }
)

_MEDIA_METHODS = {
    "senddocument": "document",
    "sendphoto": "photo",
    "sendaudio": "audio",
    "sendvoice": "voice",
    "sendvideo": "video",
    "sendanimation": "animation",
    "sendsticker": "sticker",
}

_MDV2_RESERVED = frozenset("_*[]()~`>#+-=|{}.!")

# BotCommandScope types and the fields each needs (Bot API, "BotCommandScope").
_SCOPE_FIELDS: dict[str, tuple[str, ...]] = {
    "default": (),
    "all_private_chats": (),
    "all_group_chats": (),
    "all_chat_administrators": (),
    "chat": ("chat_id",),
    "chat_administrators": ("chat_id",),
    "chat_member": ("chat_id", "user_id"),
}
_COMMAND_NAME = re.compile(r"^[a-z0-9_]{1,32}$")
MAX_DESCRIPTION_LENGTH = 512
MAX_SHORT_DESCRIPTION_LENGTH = 120
# (scope type, uses chat_id, uses user_id, administrators only), most specific first (Bot API,
# "Determining list of commands"); each is tried with the user's language first, then without.
_PRIVATE_ORDER = (("chat", True, False, False), ("all_private_chats", False, False, False))
_GROUP_ORDER = (
    ("chat_member", True, True, False),
    ("chat_administrators", True, False, True),
    ("chat", True, False, False),
    ("all_chat_administrators", False, False, True),
    ("all_group_chats", False, False, False),
)


# The largest file a bot may upload (sendDocument and the other send methods): 50 MB.
UPLOAD_LIMIT = 50 * 1000 * 1000


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units, the unit Telegram uses for lengths and entity offsets."""
    return len(text.encode("utf-16-le")) // 2


@dataclass(frozen=True)
class TelegramError:
    """An error reply of the fake Bot API: HTTP status, description and optional extra parameters."""

    status: int
    description: str
    parameters: JsonDict | None = None
    raw_body: str | None = None
    content_type: str = "application/json"

    def response(self) -> web.Response:
        """Render the error as the HTTP response Telegram would send."""
        if self.raw_body is not None:
            return web.Response(status=self.status, text=self.raw_body, content_type=self.content_type)
        body: JsonDict = {"ok": False, "error_code": self.status, "description": self.description}
        if self.parameters:
            body["parameters"] = self.parameters
        return web.json_response(body, status=self.status)


class _ApiError(Exception):
    """Raised inside method handlers to answer with a Bot API error."""

    def __init__(self, error: TelegramError) -> None:
        super().__init__(error.description)
        self.error = error


def _bad_request(description: str) -> _ApiError:
    return _ApiError(TelegramError(400, f"Bad Request: {description}"))


def named_error(name: str, *, retry_after: int = 1) -> TelegramError:
    """Build a canned Telegram error by name (``retry_after``, ``bad_gateway``, ``cant_parse``, ...)."""
    if name == "retry_after":
        return TelegramError(
            429, f"Too Many Requests: retry after {retry_after}", {"retry_after": retry_after}
        )
    if name == "bad_gateway":
        html = (
            "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
            "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.18.0</center>\r\n"
            "</body>\r\n</html>\r\n"
        )
        return TelegramError(502, "Bad Gateway", raw_body=html, content_type="text/html")
    if name == "cant_parse":
        return TelegramError(
            400,
            "Bad Request: can't parse entities: Can't find end of the entity starting at byte offset 0",
        )
    if name == "message_not_modified":
        return TelegramError(
            400,
            "Bad Request: message is not modified: specified new message content and reply markup are "
            "exactly the same as a current content and reply markup of the message",
        )
    simple: dict[str, tuple[int, str]] = {
        "message_too_long": (400, "Bad Request: message is too long"),
        "message_empty": (400, "Bad Request: message text is empty"),
        "message_to_edit_not_found": (400, "Bad Request: message to edit not found"),
        "chat_not_found": (400, "Bad Request: chat not found"),
        "forbidden": (403, "Forbidden: bot was blocked by the user"),
        "unauthorized": (401, "Unauthorized"),
        "conflict": (
            409,
            "Conflict: terminated by other getUpdates request; make sure that only one bot instance "
            "is running",
        ),
        "server_error": (500, "Internal Server Error"),
    }
    if name not in simple:
        known = sorted([*simple, "retry_after", "bad_gateway", "cant_parse", "message_not_modified", "hang"])
        raise ValueError(f"unknown Telegram error name {name!r}; known: {known}")
    status, description = simple[name]
    return TelegramError(status, description)


@dataclass
class UploadedFile:
    """A file part received in a multipart request (e.g. the ``document`` of ``sendDocument``)."""

    filename: str
    content_type: str
    data: bytes


@dataclass
class Call:
    """One recorded Bot API request: the method, its decoded parameters, and how the fake answered."""

    method: str
    params: JsonDict
    time: float
    status: int = 200
    result: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the fake answered with ``{"ok": true, ...}``."""
        return self.status == 200


@dataclass
class _Fault:
    method: str
    error: TelegramError | None
    remaining: int | None
    predicate: ParamsPredicate | None = None
    hang: float = 0.0


class _Notifier:
    """Wake-up-on-change primitive usable from sync code (no lock needed)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        event = self._event
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout=max(timeout, 0.0))


def _decode_value(key: str, value: str) -> Any:
    if key in _STRING_PARAMS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


class _HTMLText(HTMLParser):
    """Collects the text an HTML-formatted message shows (tags dropped, entities decoded)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


_MD_LINK = re.compile(r"\[((?:[^\]\\]|\\.)*)\]\((?:[^)\\]|\\.)*\)")


def parsed_text(text: str, parse_mode: Any) -> str:
    """The text Telegram counts for ``parse_mode``: markup removed, entities and escapes decoded."""
    mode = str(parse_mode or "").lower()
    if mode == "html":
        parser = _HTMLText()
        parser.feed(text)
        parser.close()
        return "".join(parser.parts)
    if mode in ("markdown", "markdownv2"):
        text = _MD_LINK.sub(r"\1", text)  # [label](url) shows the label
        out, i = [], 0
        markers = "*_`[]" if mode == "markdown" else "*_~|`"
        while i < len(text):
            ch = text[i]
            if ch == "\\" and mode == "markdownv2" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 2
                continue
            if ch not in markers:
                out.append(ch)
            i += 1
        return "".join(out)
    return text


def _check_markdown_v2(text: str) -> None:
    """Reject unescaped reserved characters like Telegram does for ``parse_mode=MarkdownV2``."""
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if text.startswith("```", i):
            end = text.find("```", i + 3)
            if end < 0:
                raise _bad_request(f"can't parse entities: Can't find end of Pre entity at byte offset {i}")
            i = end + 3
            continue
        if ch == "`":
            end = i + 1
            while end < n and text[end] != "`":
                end += 2 if text[end] == "\\" else 1
            if end >= n:
                raise _bad_request(f"can't parse entities: Can't find end of Code entity at byte offset {i}")
            i = end + 1
            continue
        if text.startswith("](", i):
            end = i + 2
            while end < n and text[end] != ")":
                end += 2 if text[end] == "\\" else 1
            i = end + 1
            continue
        if ch in ".!-+=#{}()" or (ch == ">" and i > 0 and text[i - 1] != "\n"):
            raise _bad_request(
                f"can't parse entities: Character '{ch}' is reserved and must be escaped with the "
                "preceding '\\'"
            )
        i += 1


def _text_entities(text: str) -> list[JsonDict]:
    """The entities Telegram itself adds to a text: a leading bot command and @mentions."""
    out: list[JsonDict] = []
    if text.startswith("/"):
        command = text.split(maxsplit=1)[0]
        out.append({"type": "bot_command", "offset": 0, "length": utf16_len(command)})
    for m in re.finditer(r"(?<![\w/])@[A-Za-z0-9_]{3,}", text):
        out.append(
            {"type": "mention", "offset": utf16_len(text[: m.start()]), "length": utf16_len(m.group())}
        )
    return out


class FakeTelegram:
    """Loopback Bot API server: records calls, keeps chat state, serves long polling and injects faults."""

    def __init__(
        self,
        token: str = "123:ABC",
        *,
        host: str = "127.0.0.1",
        strict_entities: bool = True,
        bot_username: str = "test_bot",
        bot_first_name: str = "TestBot",
        first_update_id: int = 10_000,
    ) -> None:
        """`first_update_id`: where this server's update ids start (a second server standing for the same
        Telegram bot must not reuse the first one's ids: the bot drops an update id it has seen)."""
        self.token = token
        self.host = host
        self.strict_entities = strict_entities
        # The longest text (UTF-16 units after parsing) sendMessage and editMessageText accept.
        self.message_limit = MAX_MESSAGE_LENGTH
        self.port = 0
        bot_id = token.split(":", 1)[0]
        self.bot_user: JsonDict = {
            "id": int(bot_id) if bot_id.isdigit() else 1,
            "is_bot": True,
            "first_name": bot_first_name,
            "username": bot_username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }
        # Guest and inline mode: @BotFather's guest mode and /setinlinefeedback switches, the queries not
        # answered yet (id -> the chat it came from, None for an inline query), and the messages posted as
        # their answers (inline_message_id -> {"chat_id", "text", "entities", "reply_markup"}).
        self.guest_mode = False
        self.inline_feedback = False
        self.open_guest_queries: dict[str, int] = {}
        self.open_inline_queries: dict[str, int] = {}
        self.inline_answers: dict[str, list[JsonDict]] = {}  # inline query id -> the results answered
        self.inline_messages: dict[str, JsonDict] = {}
        self._query_ids = itertools.count(1)
        self.calls: list[Call] = []
        self.messages: dict[int, list[JsonDict]] = {}
        self.incoming: dict[int, list[JsonDict]] = {}  # users' messages pushed by push_text, per chat
        self.updates: list[JsonDict] = []
        # (scope type, chat_id, user_id, language_code) -> the commands set for it
        self.commands: dict[tuple[str, int | None, int | None, str], list[JsonDict]] = {}
        # language_code ("" for all languages) -> the bot's description / short description
        self.descriptions: dict[str, str] = {}
        self.short_descriptions: dict[str, str] = {}
        self.webhook_url = ""
        # getWebhookInfo's last_error_date (unix time) and last_error_message: Telegram could not deliver
        self.webhook_error: tuple[int, str] | None = None
        # chat id (None: every private chat's default) -> the menu button set by setChatMenuButton
        self.menu_buttons: dict[int | None, JsonDict] = {}
        self.files: dict[str, tuple[str, bytes]] = {}
        # file_id -> the size getFile reports, for files "bigger" than the bytes stored (the 20 MB limit)
        self.declared_sizes: dict[str, int] = {}
        self.latency = 0.0
        self._faults: list[_Fault] = []
        # hold_updates: getUpdates hangs ("hang", until release_updates) or fails with 502 ("fail")
        self._updates_hold: str | None = None
        self._updates_released = asyncio.Event()
        self.held_polls = 0  # getUpdates calls that met a hold
        self._chats: dict[int, JsonDict] = {}
        self._topics: dict[int, dict[int, JsonDict]] = {}  # forum chat id -> thread id -> its root message
        self._users: dict[int, JsonDict] = {}
        self._message_ids: dict[int, itertools.count[int]] = {}
        self._update_ids = itertools.count(first_update_id)
        self._file_ids = itertools.count(1)
        self._callback_ids = itertools.count(1)
        self._notifier = _Notifier()
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        """PTB ``base_url``: PTB requests ``{base_url}{token}/{method}``."""
        return f"http://{self.host}:{self.port}/bot"

    @property
    def base_file_url(self) -> str:
        """PTB ``base_file_url``: PTB downloads ``{base_file_url}{token}/{file_path}``."""
        return f"http://{self.host}:{self.port}/file/bot"

    async def start(self) -> None:
        """Start the HTTP server on an ephemeral port of ``host``."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, 0)
        await site.start()
        self.port = int(runner.addresses[0][1])
        self._runner = runner

    async def close(self) -> None:
        """Release pending long polls and stop the server."""
        self._closing.set()
        self._notifier.notify()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ inspection helpers

    def calls_to(self, method: str) -> list[Call]:
        """All recorded calls of ``method`` (case-insensitive), successful or not."""
        low = method.lower()
        return [c for c in self.calls if c.method.lower() == low]

    def sent_texts(self, chat_id: int) -> list[str]:
        """The texts (or captions) of the bot's messages currently visible in ``chat_id``, in order."""
        return [str(m.get("text", m.get("caption", ""))) for m in self.messages.get(chat_id, [])]

    def topic_texts(self, chat_id: int, thread_id: int | None) -> list[str]:
        """The texts of the bot's visible messages in one forum topic (None: the General topic)."""
        return [
            str(m.get("text", m.get("caption", "")))
            for m in self.messages.get(chat_id, [])
            if (m.get("message_thread_id") if m.get("is_topic_message") else None) == thread_id
        ]

    def last_message(self, chat_id: int) -> JsonDict:
        """The bot's latest visible message in ``chat_id`` (AssertionError if none)."""
        msgs = self.messages.get(chat_id)
        if not msgs:
            raise AssertionError(f"no bot messages in chat {chat_id}\n{self.describe_calls()}")
        return msgs[-1]

    def describe_calls(self, limit: int = 40) -> str:
        """A readable summary of the last ``limit`` recorded calls (used in assertion messages)."""
        lines = [f"recorded calls ({len(self.calls)} total, last {limit}):"]
        for c in self.calls[-limit:]:
            params = {k: v for k, v in c.params.items() if not isinstance(v, UploadedFile)}
            shown = json.dumps(params, ensure_ascii=False, default=str)
            if len(shown) > 300:
                shown = shown[:300] + "..."
            err = f" error={c.error!r}" if c.error else ""
            lines.append(f"  {c.method} -> {c.status}{err} {shown}")
        return "\n".join(lines)

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 60.0, what: str = "") -> Any:
        """Wait until ``predicate()`` is truthy (re-checked on every state change) and return its value."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            value = predicate()
            if value:
                return value
            remaining = deadline - loop.time()
            if remaining <= 0:
                label = what or getattr(predicate, "__name__", "predicate")
                raise AssertionError(
                    f"timed out after {timeout}s waiting for {label}\n{self.describe_calls()}"
                )
            await self._notifier.wait(min(remaining, 0.5))

    async def wait_for_call(
        self,
        method: str,
        count: int = 1,
        chat_id: int | str | None = None,
        timeout: float = 60.0,
        ok: bool | None = None,
    ) -> list[Call]:
        """Wait until at least ``count`` calls of ``method`` (optionally to ``chat_id``) were answered."""

        def matching() -> list[Call]:
            found = self.calls_to(method)
            if chat_id is not None:
                found = [c for c in found if c.params.get("chat_id") == chat_id]
            if ok is not None:
                found = [c for c in found if c.ok == ok]
            return found

        what = f"{count} call(s) to {method}" + (f" for chat {chat_id}" if chat_id is not None else "")
        await self.wait_for(lambda: len(matching()) >= count, timeout=timeout, what=what)
        return matching()

    # ------------------------------------------------------------------ fault injection

    def fail_next(
        self,
        method: str,
        times: int = 1,
        error: str | TelegramError = "retry_after",
        retry_after: int = 1,
        hang: float = 5.0,
    ) -> None:
        """Answer the next ``times`` calls of ``method`` with ``error``.

        ``error`` is a name (``retry_after``, ``bad_gateway``, ``cant_parse``, ``message_not_modified``,
        ``message_too_long``, ``forbidden``, ``chat_not_found``, ``server_error``, ...) or a TelegramError.
        ``error="hang"`` delays the call by ``hang`` seconds and then processes it normally (client timeouts).
        """
        self._faults.append(self._make_fault(method, times, error, retry_after, hang, None))

    def fail_when(
        self,
        method: str,
        predicate: ParamsPredicate,
        error: str | TelegramError = "cant_parse",
        times: int | None = None,
        retry_after: int = 1,
        hang: float = 5.0,
    ) -> None:
        """Answer calls of ``method`` whose params satisfy ``predicate`` with ``error`` (None: always)."""
        self._faults.append(self._make_fault(method, times, error, retry_after, hang, predicate))

    def hold_updates(self, mode: str = "hang") -> None:
        """From now on every getUpdates hangs (``"hang"``: no answer until `release_updates`) or fails with
        502 Bad Gateway (``"fail"``); every other method answers as usual."""
        if mode not in ("hang", "fail"):
            raise ValueError(f"unknown hold {mode!r}: 'hang' or 'fail'")
        self._updates_hold = mode
        self._updates_released = asyncio.Event()

    def release_updates(self) -> None:
        """getUpdates answers again; the calls left hanging go on as usual."""
        self._updates_hold = None
        self._updates_released.set()

    async def _held(self) -> None:
        self.held_polls += 1
        self._notifier.notify()
        if self._updates_hold == "fail":
            raise _ApiError(named_error("bad_gateway"))
        released = asyncio.ensure_future(self._updates_released.wait())
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            await asyncio.wait({released, closing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            released.cancel()
            closing.cancel()

    def clear_faults(self) -> None:
        """Remove every scripted fault."""
        self._faults.clear()

    @staticmethod
    def _make_fault(
        method: str,
        times: int | None,
        error: str | TelegramError,
        retry_after: int,
        hang: float,
        predicate: ParamsPredicate | None,
    ) -> _Fault:
        if error == "hang":
            return _Fault(method.lower(), None, times, predicate, hang)
        err = named_error(error, retry_after=retry_after) if isinstance(error, str) else error
        return _Fault(method.lower(), err, times, predicate)

    def _take_fault(self, method: str, params: JsonDict) -> _Fault | None:
        low = method.lower()
        for fault in self._faults:
            if fault.method != low or (fault.predicate is not None and not fault.predicate(params)):
                continue
            if fault.remaining is not None:
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
            return fault
        return None

    # ------------------------------------------------------------------ update injection

    def _user(self, user_id: int, first_name: str, username: str | None) -> JsonDict:
        user: JsonDict = {"id": user_id, "is_bot": False, "first_name": first_name, "language_code": "en"}
        if username:
            user["username"] = username
        self._users[user_id] = user
        return user

    def _chat(self, chat_id: int) -> JsonDict:
        if chat_id in self._chats:
            return dict(self._chats[chat_id])
        if chat_id > 0:
            user = self._users.get(chat_id, {"first_name": "Ann"})
            chat: JsonDict = {"id": chat_id, "type": "private", "first_name": user["first_name"]}
            if "username" in user:
                chat["username"] = user["username"]
        else:
            kind = "supergroup" if str(chat_id).startswith("-100") else "group"
            chat = {"id": chat_id, "type": kind, "title": "Test group"}
            if chat_id in self._topics:
                chat["is_forum"] = True
        return chat

    def _next_message_id(self, chat_id: int) -> int:
        counter = self._message_ids.setdefault(chat_id, itertools.count(1))
        return next(counter)

    def _incoming(
        self,
        user_id: int,
        chat_id: int | None,
        first_name: str,
        username: str | None,
        thread_id: int | None = None,
        reply_to: JsonDict | None = None,
    ) -> JsonDict:
        sender = self._user(user_id, first_name, username)
        cid = user_id if chat_id is None else chat_id
        self._chats.pop(cid, None)
        chat = self._chat(cid)
        self._chats[cid] = chat
        msg: JsonDict = {
            "message_id": self._next_message_id(cid),
            "from": sender,
            "chat": chat,
            "date": int(time.time()),
        }
        if thread_id is not None:
            root = self._topics.get(cid, {}).get(thread_id)
            if root is None:
                raise ValueError(f"chat {cid} has no forum topic {thread_id} (create_topic makes one)")
            msg["message_thread_id"] = thread_id
            msg["is_topic_message"] = True
            # Telegram makes every message of a topic a reply to the topic's creation message.
            msg["reply_to_message"] = root
        elif reply_to is not None and chat["type"] == "supergroup":
            # A reply outside a topic belongs to the thread of replies of the message it answers.
            msg["message_thread_id"] = reply_to.get("message_thread_id") or reply_to["message_id"]
        if reply_to is not None:
            msg["reply_to_message"] = reply_to
        return msg

    def create_topic(self, chat_id: int, name: str = "Topic", by: int | None = None) -> int:
        """Make ``chat_id`` (a supergroup, -100...) a forum if it is not yet, and add a topic created by user
        ``by`` (an admin by default; the bot's id for a topic the bot made) to it; returns the topic's
        ``message_thread_id``: the id of its ``forum_topic_created`` service message, as in Telegram."""
        if not str(chat_id).startswith("-100"):
            raise ValueError("only supergroups (ids starting with -100) can be forums")
        thread_id = self._next_message_id(chat_id)
        if thread_id == 1:  # the General topic's: Telegram refuses it as a message_thread_id
            thread_id = self._next_message_id(chat_id)
        topics = self._topics.setdefault(chat_id, {})
        self._chats.pop(chat_id, None)
        creator = (
            dict(self.bot_user)
            if by == self.bot_user["id"]
            else self._users.get(by or 0) or {"id": by or 1000, "is_bot": False, "first_name": "Admin"}
        )
        topics[thread_id] = {
            "message_id": thread_id,
            "from": creator,
            "chat": self._chat(chat_id),
            "date": int(time.time()),
            "message_thread_id": thread_id,
            "is_topic_message": True,
            "forum_topic_created": {"name": name, "icon_color": 7322096},
        }
        return thread_id

    def push_update(self, update: JsonDict) -> int:
        """Queue a raw update dict for getUpdates (``update_id`` assigned if missing); returns update_id."""
        upd = dict(update)
        if "update_id" not in upd:
            upd["update_id"] = next(self._update_ids)
        self.updates.append(upd)
        self._notifier.notify()
        return int(upd["update_id"])

    def push_text(
        self,
        user_id: int,
        text: str,
        chat_id: int | None = None,
        first_name: str = "Ann",
        username: str | None = None,
        reply_to: JsonDict | None = None,
        quote: str | None = None,
        thread_id: int | None = None,
        forward_from: str | None = None,
    ) -> int:
        """Queue a text message from ``user_id`` (private chat unless ``chat_id``); returns the update_id.

        ``reply_to``: the message it replies to (e.g. from ``sent``/``incoming``), ``quote`` the part quoted;
        ``thread_id``: the forum topic it is written in (``create_topic``); ``forward_from``: the first name
        of the user it was forwarded from (a MessageOriginUser). Commands and @mentions get their entities,
        as Telegram adds them."""
        msg = self._incoming(user_id, chat_id, first_name, username, thread_id, reply_to)
        msg["text"] = text
        if forward_from is not None:
            msg["forward_origin"] = {
                "type": "user",
                "date": msg["date"] - 3600,
                "sender_user": {"id": 900_001, "is_bot": False, "first_name": forward_from},
            }
        entities = _text_entities(text)
        if entities:
            msg["entities"] = entities
        if quote is not None:
            msg["quote"] = {
                "text": quote,
                "position": max(0, str(reply_to.get("text", "")).find(quote)) if reply_to else 0,
            }
        self.incoming.setdefault(msg["chat"]["id"], []).append(msg)
        return self.push_update({"message": msg})

    def push_edit(self, message: JsonDict, text: str) -> int:
        """Queue an edited_message update: ``message`` (a dict ``push_text`` made) with new ``text``."""
        edited = dict(message, text=text, edit_date=int(time.time()))
        entities = _text_entities(text)
        edited.pop("entities", None)
        if entities:
            edited["entities"] = entities
        return self.push_update({"edited_message": edited})

    def push_sticker(self, user_id: int, chat_id: int | None = None, emoji: str = "👍") -> int:
        """Queue a sticker message from ``user_id``; returns the update_id."""
        msg = self._incoming(user_id, chat_id, self._users.get(user_id, {}).get("first_name", "Ann"), None)
        file_id = self.add_file(b"RIFF\x00\x00\x00\x00WEBPVP8 ", "stickers/sticker.webp")
        msg["sticker"] = {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "type": "regular",
            "width": 512,
            "height": 512,
            "is_animated": False,
            "is_video": False,
            "emoji": emoji,
        }
        return self.push_update({"message": msg})

    def push_photo(
        self,
        user_id: int,
        chat_id: int | None = None,
        caption: str | None = None,
        data: bytes | None = None,
        media_group_id: str | None = None,
        reply_to: JsonDict | None = None,
    ) -> int:
        """Queue a photo message (two sizes, downloadable via getFile) from ``user_id``; returns update_id."""
        msg = self._incoming(user_id, chat_id, self._users.get(user_id, {}).get("first_name", "Ann"), None)
        if reply_to is not None:
            msg["reply_to_message"] = reply_to
        if media_group_id is not None:
            msg["media_group_id"] = media_group_id
        payload = data if data is not None else b"\xff\xd8\xff\xe0fake-jpeg\xff\xd9"
        sizes = []
        for width in (90, 800):
            file_id = self.add_file(payload, f"photos/file_{width}.jpg")
            sizes.append(
                {
                    "file_id": file_id,
                    "file_unique_id": f"u{file_id}",
                    "width": width,
                    "height": width * 3 // 4,
                    "file_size": len(payload),
                }
            )
        msg["photo"] = sizes
        if caption is not None:
            msg["caption"] = caption
            entities = _text_entities(caption)  # mentions in a caption get entities too
            if entities:
                msg["caption_entities"] = entities
        return self.push_update({"message": msg})

    def push_voice(
        self,
        user_id: int,
        data: bytes,
        duration: int,
        *,
        kind: str = "voice",
        mime_type: str = "audio/ogg",
        chat_id: int | None = None,
        caption: str | None = None,
        file_size: int | None = None,
        reply_to: JsonDict | None = None,
        thread_id: int | None = None,
    ) -> int:
        """Queue a voice note (or ``kind`` "audio" / "video_note") with downloadable bytes; returns its id.
        ``thread_id``: the forum topic it is sent in."""
        first_name = self._users.get(user_id, {}).get("first_name", "Ann")
        msg = self._incoming(user_id, chat_id, first_name, None, thread_id, reply_to)
        file_id = self.add_file(data, f"{kind}/file.oga", size=file_size)
        item: JsonDict = {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "duration": duration,
            "file_size": file_size if file_size is not None else len(data),
        }
        if kind == "video_note":
            item["length"] = 240
        else:
            item["mime_type"] = mime_type
        if kind == "audio":
            item["file_name"] = "recording.mp3"
        msg[kind] = item
        if caption is not None:
            msg["caption"] = caption
            entities = _text_entities(caption)  # mentions in a caption get entities too
            if entities:
                msg["caption_entities"] = entities
        return self.push_update({"message": msg})

    def push_document(
        self,
        user_id: int,
        data: bytes,
        file_name: str,
        mime_type: str | None = None,
        *,
        chat_id: int | None = None,
        caption: str | None = None,
        file_size: int | None = None,
        media_group_id: str | None = None,
    ) -> int:
        """Queue a document (a file) with downloadable bytes; ``file_size`` may claim more than ``data``."""
        msg = self._incoming(user_id, chat_id, self._users.get(user_id, {}).get("first_name", "Ann"), None)
        file_id = self.add_file(data, f"documents/{file_name}", size=file_size)
        doc: JsonDict = {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "file_name": file_name,
            "file_size": file_size if file_size is not None else len(data),
        }
        if mime_type is not None:
            doc["mime_type"] = mime_type
        msg["document"] = doc
        if caption is not None:
            msg["caption"] = caption
            entities = _text_entities(caption)  # mentions in a caption get entities too
            if entities:
                msg["caption_entities"] = entities
        if media_group_id is not None:
            msg["media_group_id"] = media_group_id
        return self.push_update({"message": msg})

    def push_location(
        self, user_id: int, latitude: float, longitude: float, chat_id: int | None = None
    ) -> int:
        """Queue a location message; returns the update_id."""
        msg = self._incoming(user_id, chat_id, self._users.get(user_id, {}).get("first_name", "Ann"), None)
        msg["location"] = {"latitude": latitude, "longitude": longitude}
        return self.push_update({"message": msg})

    def push_callback(
        self, user_id: int, data: str, message_id: int | None = None, chat_id: int | None = None
    ) -> int:
        """Queue a callback query (inline button press) on a bot message; returns the update_id."""
        cid = user_id if chat_id is None else chat_id
        msgs = self.messages.get(cid, [])
        message = next((m for m in msgs if m["message_id"] == message_id), msgs[-1] if msgs else None)
        query: JsonDict = {
            "id": str(next(self._callback_ids)),
            "from": self._users.get(user_id) or self._user(user_id, "Ann", None),
            "chat_instance": f"ci{cid}",
            "data": data,
        }
        if message is not None:
            query["message"] = message
        return self.push_update({"callback_query": query})

    # ------------------------------------------------------------------ guest and inline mode

    def push_guest_message(
        self,
        user_id: int,
        text: str,
        chat_id: int | None = None,
        first_name: str = "Ann",
        reply_to: JsonDict | None = None,
    ) -> str:
        """Queue a guest query: ``user_id`` mentions the bot in ``chat_id`` (another private chat or a group,
        which the bot need not be in); returns its ``guest_query_id``."""
        cid = chat_id if chat_id is not None else user_id + 1  # a private chat with someone else
        msg = self._incoming(user_id, cid, first_name, None, None, reply_to)
        msg["text"] = text
        entities = _text_entities(text)
        if entities:
            msg["entities"] = entities
        query_id = f"gq{next(self._query_ids)}"
        msg["guest_query_id"] = query_id
        self.open_guest_queries[query_id] = cid
        self.push_update({"guest_message": msg})
        return query_id

    def push_inline_query(self, user_id: int, query: str, first_name: str = "Ann") -> str:
        """Queue an inline query (``@bot query`` typed in any chat); returns its id."""
        query_id = f"iq{next(self._query_ids)}"
        sender = self._users.get(user_id) or self._user(user_id, first_name, None)
        self.open_inline_queries[query_id] = user_id
        self.push_update(
            {
                "inline_query": {
                    "id": query_id,
                    "from": sender,
                    "query": query,
                    "offset": "",
                    "chat_type": "group",
                }
            }
        )
        return query_id

    def choose_inline_result(
        self, user_id: int, query_id: str, result_id: str, chat_id: int = -100777
    ) -> str | None:
        """The user picks result ``result_id`` of inline query ``query_id``: it is posted into ``chat_id``.
        Returns its inline_message_id (None when the result has no keyboard: Telegram gives none then)."""
        results = self.inline_answers.get(query_id)
        if results is None:
            raise ValueError(f"inline query {query_id} was not answered")
        result = next((r for r in results if r.get("id") == result_id), None)
        if result is None:
            raise ValueError(f"inline query {query_id} has no result {result_id!r}")
        markup = result.get("reply_markup")
        inline_id = None
        if isinstance(markup, dict) and "inline_keyboard" in markup:
            inline_id = f"im{next(self._query_ids)}"
            content = result.get("input_message_content") or {}
            self.inline_messages[inline_id] = {
                "chat_id": chat_id,
                "text": content.get("message_text", ""),
                "entities": content.get("entities") or [],
                "reply_markup": markup,
            }
        if self.inline_feedback:
            chosen: JsonDict = {"result_id": result_id, "from": self._users[user_id], "query": ""}
            if inline_id is not None:
                chosen["inline_message_id"] = inline_id
            self.push_update({"chosen_inline_result": chosen})
        return inline_id

    def push_inline_callback(self, user_id: int, data: str, inline_message_id: str) -> int:
        """Queue a button press on an inline message (it has no chat: only ``inline_message_id``)."""
        query: JsonDict = {
            "id": str(next(self._callback_ids)),
            "from": self._users.get(user_id) or self._user(user_id, "Ann", None),
            "chat_instance": "ci-inline",
            "data": data,
            "inline_message_id": inline_message_id,
        }
        return self.push_update({"callback_query": query})

    @staticmethod
    def _check_result(result: Any) -> JsonDict:
        """An InlineQueryResult as the Bot API checks it (articles fully; other types by id and type)."""
        if not isinstance(result, dict) or not result.get("type") or not result.get("id"):
            raise _bad_request(
                "RESULT_ID_EMPTY" if isinstance(result, dict) else "can't parse inline query result"
            )
        if len(str(result["id"]).encode()) > 64:
            raise _bad_request("RESULT_ID_INVALID")
        if result["type"] == "article":
            content = result.get("input_message_content")
            if not result.get("title"):
                raise _bad_request("RESULT_TITLE_EMPTY")
            if not isinstance(content, dict) or not str(content.get("message_text", "")).strip():
                raise _bad_request("MESSAGE_EMPTY")
            if utf16_len(str(content["message_text"])) > MAX_MESSAGE_LENGTH:
                raise _bad_request("MESSAGE_TOO_LONG")
        return result

    def _answer_guest_query(self, p: JsonDict) -> JsonDict:
        query_id = p.get("guest_query_id")
        if query_id not in self.open_guest_queries:
            raise _bad_request("query is too old and response timeout expired or query ID is invalid")
        result = self._check_result(p.get("result"))
        chat_id = self.open_guest_queries.pop(str(query_id))
        content = result.get("input_message_content") or {}
        inline_id = f"im{next(self._query_ids)}"
        self.inline_messages[inline_id] = {
            "chat_id": chat_id,
            "text": content.get("message_text", ""),
            "entities": content.get("entities") or [],
            "reply_markup": result.get("reply_markup"),
        }
        return {"inline_message_id": inline_id}

    def _answer_inline_query(self, p: JsonDict) -> bool:
        query_id = p.get("inline_query_id")
        if query_id not in self.open_inline_queries:
            raise _bad_request("query is too old and response timeout expired or query ID is invalid")
        results = p.get("results")
        if not isinstance(results, list) or len(results) > 50:
            raise _bad_request("RESULTS_TOO_MUCH" if isinstance(results, list) else "can't parse results")
        checked = [self._check_result(r) for r in results]
        if len({r["id"] for r in checked}) != len(checked):
            raise _bad_request("RESULT_ID_DUPLICATE")
        button = p.get("button")
        if button is not None:
            start = str(button.get("start_parameter", "")) if isinstance(button, dict) else ""
            if not button.get("text") or (start and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", start)):
                raise _bad_request("BUTTON_INVALID")
        del self.open_inline_queries[str(query_id)]
        self.inline_answers[str(query_id)] = checked
        return True

    def _edit_inline(self, p: JsonDict) -> bool:
        msg = self.inline_messages.get(str(p.get("inline_message_id")))
        if msg is None:
            raise _bad_request("MESSAGE_ID_INVALID")
        text, entities = p.get("text"), p.get("entities") or []
        markup = p.get("reply_markup")
        new_markup = markup if isinstance(markup, dict) and "inline_keyboard" in markup else None
        if msg["text"] == text and msg["entities"] == entities and msg["reply_markup"] == new_markup:
            raise _ApiError(named_error("message_not_modified"))
        msg.update(text=text, entities=entities, reply_markup=new_markup)
        return True

    def add_file(self, data: bytes, file_path: str = "documents/file.bin", size: int | None = None) -> str:
        """Register downloadable bytes; returns a file_id usable with getFile.

        ``size`` makes getFile report that size (over 20 MB it answers "file is too big", as Telegram does).
        """
        file_id = f"file{next(self._file_ids)}"
        self.files[file_id] = (f"{file_id}_{file_path}", data)
        if size is not None:
            self.declared_sizes[file_id] = size
        return file_id

    # ------------------------------------------------------------------ HTTP plumbing

    async def _parse_params(self, request: web.Request) -> JsonDict:
        params: JsonDict = {k: _decode_value(k, v) for k, v in request.query.items()}
        if request.method != "POST" or not request.can_read_body:
            return params
        if request.content_type == "application/json":
            body = await request.json()
            if isinstance(body, dict):
                params.update(body)
            return params
        post = await request.post()
        for key, value in post.items():
            if isinstance(value, web.FileField):
                params[key] = UploadedFile(value.filename, value.content_type, value.file.read())
            elif isinstance(value, bytes | bytearray):
                params[key] = _decode_value(key, bytes(value).decode())
            else:
                params[key] = _decode_value(key, value)
        return params

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path.startswith("/file/bot"):
            return self._serve_file(path[len("/file/bot") :])
        if not path.startswith("/bot") or path.count("/") != 2:
            return web.json_response({"ok": False, "error_code": 404, "description": "Not Found"}, status=404)
        token, method = path[len("/bot") :].split("/", 1)
        arrived = time.monotonic()
        params = await self._parse_params(request)
        call = Call(method=method, params=params, time=arrived)
        try:
            if token != self.token:
                raise _ApiError(TelegramError(401, "Unauthorized"))
            if self.latency and method.lower() != "getupdates":
                await self._sleep(self.latency)
            if self._updates_hold is not None and method.lower() == "getupdates":
                await self._held()
            fault = self._take_fault(method, params)
            if fault is not None:
                if fault.error is not None:
                    raise _ApiError(fault.error)
                await self._sleep(fault.hang)
            result = await self._dispatch(method, params)
        except _ApiError as exc:
            call.status = exc.error.status
            call.error = exc.error.description
            self._record(call)
            return exc.error.response()
        call.result = result
        self._record(call)
        return web.json_response({"ok": True, "result": result})

    def _record(self, call: Call) -> None:
        self.calls.append(call)
        self._notifier.notify()

    def _serve_file(self, rest: str) -> web.Response:
        token, _, file_path = rest.partition("/")
        if token != self.token:
            return web.Response(status=401, text="Unauthorized")
        for stored_path, data in self.files.values():
            if stored_path == file_path:
                return web.Response(body=data, content_type="application/octet-stream")
        return web.Response(status=404, text="Not Found")

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), timeout=seconds)

    async def _dispatch(self, method: str, p: JsonDict) -> Any:
        low = method.lower()
        if low in _MEDIA_METHODS:
            return self._send_media(_MEDIA_METHODS[low], p)
        simple: dict[str, Any] = {
            "getme": lambda: dict(self.bot_user, supports_guest_queries=self.guest_mode),
            "answerguestquery": lambda: self._answer_guest_query(p),
            "answerinlinequery": lambda: self._answer_inline_query(p),
            "sendmessage": lambda: self._send_message(p),
            "editmessagetext": lambda: self._edit_message_text(p),
            "deletemessage": lambda: self._delete_messages(p, [p.get("message_id")]),
            "deletemessages": lambda: self._delete_messages(p, list(p.get("message_ids") or [])),
            "setmycommands": lambda: self._set_commands(p),
            "getmycommands": lambda: list(self.commands.get(self._scope_key(p), [])),
            "deletemycommands": lambda: self._delete_commands(p),
            "setmydescription": lambda: self._set_text(p, "description", self.descriptions),
            "getmydescription": lambda: {"description": self.descriptions.get(self._language(p), "")},
            "setmyshortdescription": lambda: self._set_text(p, "short_description", self.short_descriptions),
            "getmyshortdescription": lambda: {
                "short_description": self.short_descriptions.get(self._language(p), "")
            },
            "deletewebhook": lambda: self._delete_webhook(p),
            "setwebhook": lambda: self._set_webhook(p),
            "getwebhookinfo": lambda: self._webhook_info(),
            "getfile": lambda: self._get_file(p),
            "setchatmenubutton": lambda: self._set_menu_button(p),
            "getchatmenubutton": lambda: self.menu_button_for(p.get("chat_id")),
        }
        if low == "getupdates":
            return await self._get_updates(p)
        if low == "sendchataction":
            self._thread(self._require_chat(p), p, None)
            return True
        if low in simple:
            return simple[low]()
        # sendChatAction, answerCallbackQuery, close, logOut and anything else.
        return True

    # ------------------------------------------------------------------ method implementations

    def _require_chat(self, p: JsonDict) -> int:
        chat_id = p.get("chat_id")
        if chat_id is None or chat_id == "":
            raise _bad_request("chat_id is empty")
        if not isinstance(chat_id, int):
            raise _bad_request("chat not found")
        return chat_id

    def _validate_text(self, text: Any, entities: Any, parse_mode: Any, *, limit: int, caption: bool) -> None:
        if not caption and (not isinstance(text, str) or not text.strip()):
            raise _bad_request("message text is empty")
        if not isinstance(text, str):
            return
        length = utf16_len(text)
        if utf16_len(parsed_text(text, None if entities is not None else parse_mode)) > limit:
            raise _bad_request("message caption is too long" if caption else "message is too long")
        if entities is not None:
            if not isinstance(entities, list) or not all(isinstance(e, dict) for e in entities):
                raise _bad_request("can't parse entities: entities must be an array of MessageEntity")
            if self.strict_entities:
                for idx, ent in enumerate(entities):
                    off, ln = ent.get("offset"), ent.get("length")
                    if (
                        not isinstance(off, int)
                        or not isinstance(ln, int)
                        or off < 0
                        or ln <= 0
                        or off + ln > length
                        or "type" not in ent
                    ):
                        raise _bad_request(
                            f"can't parse entities: entity #{idx} {ent} is out of the text bounds "
                            f"(UTF-16 length {length})"
                        )
        elif parse_mode == "MarkdownV2":
            _check_markdown_v2(text)

    def _new_message(self, chat_id: int, p: JsonDict) -> JsonDict:
        msg: JsonDict = {
            "message_id": self._next_message_id(chat_id),
            "from": dict(self.bot_user),
            "chat": self._chat(chat_id),
            "date": int(time.time()),
        }
        markup = p.get("reply_markup")
        if isinstance(markup, dict) and "inline_keyboard" in markup:
            msg["reply_markup"] = markup
        thread = self._thread(chat_id, p, self._replied_to(chat_id, p))
        if thread is not None:
            msg["message_thread_id"] = thread
            msg["is_topic_message"] = True
        return msg

    def _replied_to(self, chat_id: int, p: JsonDict) -> JsonDict | None:
        reply = p.get("reply_parameters")
        if not isinstance(reply, dict) or reply.get("chat_id") not in (None, chat_id):
            return None
        wanted = reply.get("message_id")
        for msg in [*self.messages.get(chat_id, []), *self.incoming.get(chat_id, [])]:
            if msg["message_id"] == wanted:
                return msg
        return None

    def _thread(self, chat_id: int, p: JsonDict, replied: JsonDict | None) -> int | None:
        """The forum topic a send goes to: ``message_thread_id`` (which must name a topic of a forum), or
        the topic of the message it replies to."""
        thread = p.get("message_thread_id")
        if thread is None:
            if replied is not None and replied.get("is_topic_message"):
                return int(replied["message_thread_id"])
            return None
        if not isinstance(thread, int) or thread not in self._topics.get(chat_id, {}):
            raise _bad_request("message thread not found")
        return thread

    def _send_message(self, p: JsonDict) -> JsonDict:
        chat_id = self._require_chat(p)
        text, entities = p.get("text"), p.get("entities")
        self._validate_text(text, entities, p.get("parse_mode"), limit=self.message_limit, caption=False)
        msg = self._new_message(chat_id, p)
        msg["text"] = text
        if entities:
            msg["entities"] = entities
        if isinstance(p.get("link_preview_options"), dict):
            msg["link_preview_options"] = p["link_preview_options"]
        self.messages.setdefault(chat_id, []).append(msg)
        return msg

    def _find_message(self, chat_id: int, message_id: Any, missing: str) -> JsonDict:
        for msg in self.messages.get(chat_id, []):
            if msg["message_id"] == message_id:
                return msg
        raise _bad_request(missing)

    def _edit_message_text(self, p: JsonDict) -> Any:
        text, entities = p.get("text"), p.get("entities")
        self._validate_text(text, entities, p.get("parse_mode"), limit=self.message_limit, caption=False)
        if "inline_message_id" in p:
            return self._edit_inline(p)
        chat_id = self._require_chat(p)
        msg = self._find_message(chat_id, p.get("message_id"), "message to edit not found")
        if "text" not in msg:
            raise _bad_request("there is no text in the message to edit")
        markup = p.get("reply_markup")
        new_markup = markup if isinstance(markup, dict) and "inline_keyboard" in markup else None
        if (
            msg.get("text") == text
            and (msg.get("entities") or []) == (entities or [])
            and msg.get("reply_markup") == new_markup
        ):
            raise _ApiError(named_error("message_not_modified"))
        msg["text"] = text
        msg["edit_date"] = int(time.time())
        if entities:
            msg["entities"] = entities
        else:
            msg.pop("entities", None)
        if new_markup is not None:
            msg["reply_markup"] = new_markup
        else:
            msg.pop("reply_markup", None)
        return dict(msg)

    def _delete_messages(self, p: JsonDict, ids: Iterable[Any]) -> bool:
        chat_id = self._require_chat(p)
        for message_id in ids:
            msg = self._find_message(chat_id, message_id, "message to delete not found")
            self.messages[chat_id].remove(msg)
        return True

    def _send_media(self, kind: str, p: JsonDict) -> JsonDict:
        chat_id = self._require_chat(p)
        media = p.get(kind)
        if media is None or media == "":
            raise _bad_request(f"there is no {kind} in the request")
        caption = p.get("caption")
        entities = p.get("caption_entities")
        if caption is not None:
            self._validate_text(
                caption, entities, p.get("parse_mode"), limit=MAX_CAPTION_LENGTH, caption=True
            )
        if isinstance(media, UploadedFile):
            if len(media.data) > UPLOAD_LIMIT:  # the Bot API takes uploads of at most 50 MB
                raise _ApiError(TelegramError(413, "Request Entity Too Large"))
            file_id = self.add_file(media.data, f"{kind}s/{media.filename}")
            size, name, mime = len(media.data), media.filename, media.content_type
        else:
            file_id, size, name, mime = str(media), 0, "file", "application/octet-stream"
        info: JsonDict = {"file_id": file_id, "file_unique_id": f"u{file_id}", "file_size": size}
        msg = self._new_message(chat_id, p)
        if kind == "photo":
            msg["photo"] = [{**info, "width": 800, "height": 600}]
        elif kind == "sticker":
            msg["sticker"] = {
                **info,
                "type": "regular",
                "width": 512,
                "height": 512,
                "is_animated": False,
                "is_video": False,
            }
        else:
            info.update({"file_name": name, "mime_type": mime})
            if kind in ("video", "animation"):
                info.update({"width": 640, "height": 480, "duration": 1})
            elif kind in ("audio", "voice"):
                info["duration"] = 1
            msg[kind] = info
        if caption is not None:
            msg["caption"] = caption
            if entities:
                msg["caption_entities"] = entities
        self.messages.setdefault(chat_id, []).append(msg)
        return msg

    def _get_file(self, p: JsonDict) -> JsonDict:
        file_id = str(p.get("file_id", ""))
        if file_id not in self.files:
            raise _bad_request("invalid file_id")
        path, data = self.files[file_id]
        size = self.declared_sizes.get(file_id, len(data))
        if size > 20 * 1024 * 1024:  # the Bot API's download limit
            raise _bad_request("file is too big")
        return {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "file_size": size,
            "file_path": path,
        }

    @staticmethod
    def _language(p: JsonDict) -> str:
        code = p.get("language_code") or ""
        if not isinstance(code, str) or (code and not re.fullmatch(r"[a-z]{2}", code)):
            raise _bad_request("invalid language code specified")
        return code

    @classmethod
    def _scope_key(cls, p: JsonDict) -> tuple[str, int | None, int | None, str]:
        scope = p.get("scope") or {"type": "default"}
        if not isinstance(scope, dict) or scope.get("type") not in _SCOPE_FIELDS:
            raise _bad_request("invalid scope specified")
        kind = str(scope["type"])
        for name in _SCOPE_FIELDS[kind]:
            if not isinstance(scope.get(name), int):
                raise _bad_request(f"{name} is empty" if scope.get(name) in (None, "") else "chat not found")
        chat_id = scope.get("chat_id") if "chat_id" in _SCOPE_FIELDS[kind] else None
        user_id = scope.get("user_id") if "user_id" in _SCOPE_FIELDS[kind] else None
        return kind, chat_id, user_id, cls._language(p)

    def _set_commands(self, p: JsonDict) -> bool:
        commands = p.get("commands")
        if not isinstance(commands, list):
            raise _bad_request("can't parse commands JSON object")
        if len(commands) > 100:
            raise _bad_request("too many commands specified")
        for cmd in commands:
            if not isinstance(cmd, dict) or not _COMMAND_NAME.match(str(cmd.get("command", ""))):
                raise _bad_request("BOT_COMMAND_INVALID")
            if not 1 <= len(str(cmd.get("description") or "")) <= 256:
                raise _bad_request("BOT_COMMAND_DESCRIPTION_INVALID")
        key = self._scope_key(p)
        if commands:
            self.commands[key] = commands
        else:  # an empty list is no list: the next scope in the order applies
            self.commands.pop(key, None)
        return True

    def _delete_commands(self, p: JsonDict) -> bool:
        self.commands.pop(self._scope_key(p), None)
        return True

    def commands_for(
        self, chat_id: int, user_id: int, *, group: bool = False, admin: bool = False, language: str = ""
    ) -> list[str]:
        """The command names `user_id` sees in the menu of chat `chat_id` (a private chat unless `group`),
        chosen as the Bot API documents: the first list set, from the most specific scope to the default."""
        order = (*(_GROUP_ORDER if group else _PRIVATE_ORDER), ("default", False, False, False))
        for kind, by_chat, by_user, admins_only in order:
            if admins_only and not admin:
                continue
            for lang in dict.fromkeys((language, "")):
                key = (kind, chat_id if by_chat else None, user_id if by_user else None, lang)
                if key in self.commands:
                    return [str(c["command"]) for c in self.commands[key]]
        return []

    def _set_text(self, p: JsonDict, field: str, store: dict[str, str]) -> bool:
        limit = MAX_DESCRIPTION_LENGTH if field == "description" else MAX_SHORT_DESCRIPTION_LENGTH
        value = p.get(field) or ""
        if not isinstance(value, str) or len(value) > limit:
            raise _bad_request(f"{field} is too long")
        language = self._language(p)
        if value:
            store[language] = value
        else:  # an empty (or missing) one removes the dedicated description of that language
            store.pop(language, None)
        return True

    def _set_menu_button(self, p: JsonDict) -> bool:
        button = p.get("menu_button") or {"type": "default"}
        kind = button.get("type") if isinstance(button, dict) else None
        if kind not in ("default", "commands", "web_app"):
            raise _bad_request("can't parse menu button JSON object")
        if kind == "web_app":
            url = str((button.get("web_app") or {}).get("url", ""))
            if not button.get("text") or not url.startswith("https://"):
                raise _bad_request("BUTTON_URL_INVALID" if button.get("text") else "BUTTON_TEXT_INVALID")
        chat_id = p.get("chat_id")
        if chat_id is not None and not isinstance(chat_id, int):
            raise _bad_request("chat not found")
        self.menu_buttons[chat_id] = dict(button)
        return True

    def menu_button_for(self, chat_id: Any = None) -> JsonDict:
        """The menu button a private chat shows: its own, else the default set for all, else "default"."""
        own = self.menu_buttons.get(chat_id) if isinstance(chat_id, int) else None
        return dict(own or self.menu_buttons.get(None) or {"type": "default"})

    def _webhook_info(self) -> JsonDict:
        """The updates not yet confirmed count as pending, as in the Bot API; `webhook_error` is the last
        error Telegram met delivering them."""
        info: JsonDict = {
            "url": self.webhook_url,
            "has_custom_certificate": False,
            "pending_update_count": len(self.updates),
        }
        if self.webhook_error is not None:
            info["last_error_date"], info["last_error_message"] = self.webhook_error
        return info

    def _delete_webhook(self, p: JsonDict) -> bool:
        self.webhook_url = ""
        if p.get("drop_pending_updates"):
            self.updates.clear()
        return True

    def _set_webhook(self, p: JsonDict) -> bool:
        self.webhook_url = str(p.get("url", ""))
        if p.get("drop_pending_updates"):
            self.updates.clear()
        return True

    async def _get_updates(self, p: JsonDict) -> list[JsonDict]:
        if self.webhook_url:
            raise _ApiError(
                TelegramError(409, "Conflict: can't use getUpdates method while webhook is active")
            )
        offset = p.get("offset")
        limit = p.get("limit") or 100
        timeout = float(p.get("timeout") or 0)
        if isinstance(offset, int) and offset != 0:
            if offset < 0:
                del self.updates[: max(len(self.updates) + offset, 0)]
            else:
                self.updates[:] = [u for u in self.updates if u["update_id"] >= offset]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.updates and not self._closing.is_set():
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await self._notifier.wait(remaining)
        return [dict(u) for u in self.updates[: int(limit)]]
