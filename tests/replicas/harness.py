"""Several real `python -m bot` replicas in webhook mode on one PostgreSQL, and a load balancer in front.

Each replica is a process of its own (tests/support/processes.py) listening on 127.0.0.1:<port>; they share
the database, the fake Bot API and the fake LLM. The load balancer POSTs Telegram update JSON to the replicas'
webhook path with the secret header, exactly as Telegram (or a reverse proxy in front of the replicas) does;
the same update may go to several replicas, or twice to one, as a retrying Telegram does.

Each replica has an OPENAI_API_KEY of its own, so every request the fake LLM records names the replica that
made it (`Cluster.replica_of`): the tests know which process runs a turn without asking the bot.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from sqlalchemy import Engine, create_engine
from sqlalchemy import text as sql

from tests.support.fakes.openai_api import FakeLLM, last_user_text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER
from tests.support.processes import BotProcess, fake_env, free_port

JsonDict = dict[str, Any]

SECRET = "replica-webhook-secret-0123456789"
HOOK_PATH = "tg-hook"
LEASE_S = 3  # REPLICA_LEASE_S of the tests that kill a replica: one silent this long is dead
# The other tests keep the default, so a replica starved of CPU on a busy machine is not taken for dead.
CALM_LEASE_S = 15
START_TIMEOUT_S = 60.0  # a cold start of three processes on a busy two-core machine
POST_TIMEOUT_S = (
    15.0  # a webhook POST is answered once the update is queued: at once, unless the loop is stuck
)
USERS = [OWNER, *range(1001, 1011)]  # the owner and ten more people, each in a private chat


def text_update(tg: FakeTelegram, user_id: int, text: str, chat_id: int | None = None) -> JsonDict:
    """The update Telegram sends for a text message (FakeTelegram.push_text's JSON), taken off its queue."""
    tg.push_text(user_id, text, chat_id=chat_id)
    update: JsonDict = tg.updates.pop()  # nobody polls in webhook mode: the load balancer delivers it
    return update


def callback_update(tg: FakeTelegram, user_id: int, data: str, message_id: int | None = None) -> JsonDict:
    """The update Telegram sends when a button under the bot's message is pressed."""
    tg.push_callback(user_id, data, message_id=message_id)
    update: JsonDict = tg.updates.pop()
    return update


def said(request: JsonDict) -> list[tuple[str, Any]]:
    """(role, content) of a request's conversation, without the system prompt."""
    return [(m["role"], m.get("content")) for m in request["messages"] if m["role"] != "system"]


@dataclass
class Replica:
    """One bot process of the cluster."""

    index: int
    key: str  # its OPENAI_API_KEY: names it in the fake LLM's recorded requests
    port: int
    process: BotProcess

    @property
    def name(self) -> str:
        """r1, r2, ..."""
        return f"r{self.index + 1}"

    @property
    def url(self) -> str:
        """Where Telegram (the load balancer) POSTs its updates."""
        return f"http://127.0.0.1:{self.port}/{HOOK_PATH}"


@dataclass
class Cluster:
    """N replicas on one PostgreSQL behind a load balancer; `close` kills whatever still runs."""

    root: Path
    tg: FakeTelegram
    llm: FakeLLM
    database_url: str
    users: Sequence[int]
    settings: dict[str, str] = field(default_factory=dict)
    lease_s: float = CALM_LEASE_S
    replicas: list[Replica] = field(default_factory=list)
    posts: list[tuple[str, int, int]] = field(default_factory=list)  # (replica, update_id, HTTP status)
    _http: aiohttp.ClientSession | None = None
    _engine: Engine | None = None

    # ------------------------------------------------------------------ processes

    def env(self, index: int, port: int) -> dict[str, str]:
        """The environment of replica `index`: webhook mode on its port, everything else shared."""
        home = self.root / f"r{index + 1}"
        values = {
            "ALLOWED_USER_IDS": ",".join(str(u) for u in self.users),
            "OPENAI_API_KEY": f"sk-replica-{index + 1}",
            "TELEGRAM_WEBHOOK_URL": f"https://bot.example.com/{HOOK_PATH}",
            "TELEGRAM_WEBHOOK_SECRET": SECRET,
            "TELEGRAM_WEBHOOK_LISTEN": "127.0.0.1",
            "TELEGRAM_WEBHOOK_PORT": str(port),
            "REPLICA_LEASE_S": f"{self.lease_s:g}",
            "MESSAGE_DEBOUNCE_MS": "0",
            # One turn per message, so "answered exactly once" is one answer and one LLM request each.
            "MESSAGE_MERGE_BURSTS": "false",
            "STREAM_EDIT_INTERVAL_S": "0.2",
            "MEMORY_EXTRACT": "false",
            # The fake LLM embeds too: no embedded model loaded three times on a small machine.
            "EMBEDDINGS_BASE_URL": self.llm.base_url,
            "EMBEDDINGS_MODEL": "fake-embedding",
            "EMBEDDINGS_DIM": "384",
            "MEDIA_DIR": str(home / "media"),
            "LOG_LEVEL": "INFO",
        }
        values.update(self.settings)
        return fake_env(home, self.tg, self.llm, self.database_url, **values)

    async def start(self, n: int, prefix: Sequence[str] = ()) -> list[Replica]:
        """Start `n` more replicas at once (each under the command `prefix`, if given) and wait until each
        one accepts webhook POSTs."""
        fresh = []
        for _ in range(n):
            index, port = len(self.replicas), free_port()
            env = self.env(index, port)
            process = BotProcess(self.root / f"r{index + 1}", env, name=f"r{index + 1}", prefix=prefix)
            replica = Replica(index, env["OPENAI_API_KEY"], port, process)
            self.replicas.append(replica)
            fresh.append(replica)
        await asyncio.gather(*(r.process.start() for r in fresh))
        await asyncio.gather(*(self._ready(r) for r in fresh))
        return fresh

    async def _ready(self, replica: Replica) -> None:
        # The webhook server opens after the bot's start-up (post_init): a connection means it is serving.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT_S
        while True:
            if not replica.process.running:
                raise AssertionError(f"replica {replica.name} exited at start\n{replica.process.tail()}")
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", replica.port)
                writer.close()
                await writer.wait_closed()
                return
            if loop.time() > deadline:
                raise AssertionError(f"replica {replica.name} not listening\n{replica.process.tail()}")
            await asyncio.sleep(0.1)

    async def kill(self, replica: Replica) -> None:
        """SIGKILL one replica: no clean-up, its leases and heartbeat just stop."""
        await replica.process.kill()

    @property
    def alive(self) -> list[Replica]:
        """The replicas still running."""
        return [r for r in self.replicas if r.process.running]

    def logs(self, lines: int = 25) -> str:
        """The tails of every replica's log, for assertion messages."""
        return "\n".join(r.process.tail(lines) for r in self.replicas)

    async def close(self) -> None:
        """Kill every replica and close the client and the database engine."""
        await asyncio.gather(*(r.process.kill() for r in self.replicas if r.process.proc is not None))
        if self._http is not None:
            await self._http.close()
        if self._engine is not None:
            self._engine.dispose()

    # ------------------------------------------------------------------ the load balancer

    async def post(self, replica: Replica, update: JsonDict) -> int:
        """POST one update to one replica as Telegram does; the HTTP status (0: nothing listens; 504: no
        answer within POST_TIMEOUT_S, as a proxy would say: the replica's event loop is stuck)."""
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=POST_TIMEOUT_S))
        headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
        try:
            async with self._http.post(replica.url, json=update, headers=headers) as response:
                status = response.status
        except aiohttp.ClientConnectionError:
            status = 0
        except TimeoutError:
            status = 504
        self.posts.append((replica.name, int(update["update_id"]), status))
        return status

    async def deliver(self, update: JsonDict, to: Iterable[Replica]) -> list[int]:
        """POST the same update to several replicas at once (a duplicate delivery); their statuses."""
        return list(await asyncio.gather(*(self.post(r, update) for r in to)))

    # ------------------------------------------------------------------ what happened

    def replica_of(self, request_index: int) -> Replica:
        """The replica that made the fake LLM's `request_index`-th chat request."""
        auth = self.llm.request_headers[request_index].get("Authorization", "")
        key = auth.removeprefix("Bearer ").strip()
        found = next((r for r in self.replicas if r.key == key), None)
        assert found is not None, f"an LLM request from no known replica ({auth[:20]!r})"
        return found

    def rows(self, query: str, **params: Any) -> list[tuple[Any, ...]]:
        """Rows of a query on the shared database."""
        if self._engine is None:
            self._engine = create_engine(self.database_url, pool_size=2)
        with self._engine.connect() as conn:
            return [tuple(row) for row in conn.execute(sql(query), params)]

    def stored(self, chat_id: int, tg_message_id: int) -> bool:
        """The user's message is in the database: waiting in the inbox, or already in its chat's history."""
        params = {"c": chat_id, "m": tg_message_id}
        for table in ("inbox", "messages"):
            if self.rows(f"SELECT 1 FROM {table} WHERE chat_id = :c AND tg_message_id = :m", **params):
                return True
        return False

    def texts(self, chat_id: int, exact: str) -> int:
        """How many of the bot's visible messages in the chat read exactly `exact`."""
        return sum(1 for t in self.tg.sent_texts(chat_id) if t == exact)

    def requests_for(self, user_text: str) -> list[int]:
        """Indexes of the LLM chat requests whose last user message is `user_text`."""
        return [i for i, r in enumerate(self.llm.requests) if last_user_text(r) == user_text]
