"""Who is alive, through real `python -m bot` replicas on one PostgreSQL (issue "Hold 2", items 1 and 13).

- Two replicas on one host whose pids cannot see each other (separate pid namespaces, as containers with the
  host's network): a replica starting next to a live one does not take it for dead.
- A replica whose event loop is blocked past the lease (a synchronous database call waiting for a lock) keeps
  its heartbeat: nobody takes its chat over, its user gets one answer, and it goes on serving.
- A replica frozen whole past the lease (SIGSTOP) is taken over; woken up (SIGCONT) it does not send its late
  answer, and it goes on serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy import text as sql

from tests.replicas.harness import LEASE_S, USERS, Cluster, Replica, text_update
from tests.support.databases import postgresql_only
from tests.support.fakes.openai_api import FakeLLM, Step, last_user_text, text
from tests.support.fakes.telegram_api import FakeTelegram

pytestmark = [
    pytest.mark.slow,  # several `python -m bot` processes on PostgreSQL
    postgresql_only,  # several processes on one database: PostgreSQL only
]

NOTICE = "I was restarted while answering your message"
# A pid namespace of its own, with its own /proc (the bot is its first process; --kill-child: it dies with
# the `unshare` process the test starts and kills).
NEW_PID_NAMESPACE = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")


def answer_of(message: str) -> str:
    """What the fake LLM answers to a user message."""
    return f"Answer to: {message}"


def held_back(release: dict[str, asyncio.Event]) -> Callable[[dict[str, Any]], Any]:
    """A fake LLM responder: a message named in `release` is answered once its event is set, any other at
    once; each answer names its message."""

    async def respond(body: dict[str, Any]) -> Step:
        message = last_user_text(body)
        gate = release.get(message)
        if gate is not None:
            await gate.wait()
        return text(answer_of(message))

    return respond


def notices(tg: FakeTelegram, chat: int) -> list[str]:
    """The "I was restarted while answering..." messages in a chat."""
    return [t for t in tg.sent_texts(chat) if t.startswith(NOTICE)]


async def send(cluster: Cluster, tg: FakeTelegram, to: Replica, chat: int, message: str) -> None:
    """POST a text message to one replica as Telegram does; it must be accepted at once."""
    status = await cluster.post(to, text_update(tg, chat, message))
    assert status == 200, f"{to.name} answered the webhook POST with {status}\n{cluster.logs()}"


async def answered_once(cluster: Cluster, tg: FakeTelegram, chat: int, message: str) -> None:
    """Wait for the answer to `message`; it must be there exactly once."""
    await tg.wait_for(
        lambda: cluster.texts(chat, answer_of(message)), timeout=60, what=f"the answer to {message!r}"
    )
    assert cluster.texts(chat, answer_of(message)) == 1


def heartbeat(cluster: Cluster, replica: Replica) -> datetime | None:
    """The replica's heartbeat as the database holds it (its row names its pid)."""
    rows = cluster.rows("SELECT heartbeat_at FROM replicas WHERE pid = :p", p=replica.process.pid)
    return rows[0][0] if rows else None


def db_now(cluster: Cluster) -> datetime:
    """The database's clock, the one heartbeats are judged by."""
    now: datetime = cluster.rows("SELECT timezone('UTC', now())")[0][0]
    return now


@pytest.fixture
def pid_namespaces() -> None:
    """Skip where this machine cannot make a pid namespace (it takes root, or user namespaces)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1)")
    made = subprocess.run([*NEW_PID_NAMESPACE, "true"], capture_output=True, timeout=30, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot make a pid namespace here: {made.stderr.decode(errors='replace')[:200]}")


async def test_a_replica_in_another_pid_namespace_of_the_same_host_is_not_taken_for_dead(
    cluster: Cluster, tg: FakeTelegram, llm: FakeLLM, pid_namespaces: None
) -> None:
    chat, other = USERS[1], USERS[2]
    release = {"Plan my trip to Lisbon": asyncio.Event()}
    llm.default = held_back(release)
    (first,) = await cluster.start(1)
    await send(cluster, tg, first, chat, "Plan my trip to Lisbon")
    await llm.wait_for_requests(1, timeout=30)  # its turn runs, waiting for the model

    # The second replica starts on the same host (same hostname and boot) in a pid namespace of its own:
    # the first one's pid does not exist there, yet the first one is alive.
    (second,) = await cluster.start(1, prefix=NEW_PID_NAMESPACE)
    rows = cluster.rows("SELECT host, pid FROM replicas ORDER BY started_at")
    assert rows[-1][1] < 10, f"the second replica is not in a pid namespace of its own: {rows}"
    assert len(rows) == 2, f"the first replica, alive, was taken for dead and forgotten: {rows}"
    assert rows[0][0].split("/")[0] == rows[1][0].split("/")[0]  # the same boot of the same machine
    # It serves (it joined and looks for chats nobody drives) while the first turn still runs.
    await send(cluster, tg, second, other, "Is the second replica serving?")
    await answered_once(cluster, tg, other, "Is the second replica serving?")

    release["Plan my trip to Lisbon"].set()
    await answered_once(cluster, tg, chat, "Plan my trip to Lisbon")
    # The chat's next message, through the second replica: the first one's chat was never taken from it.
    await send(cluster, tg, second, chat, "And a hotel?")
    await answered_once(cluster, tg, chat, "And a hotel?")
    assert notices(tg, chat) == [], "a live replica was taken for dead"
    await send(cluster, tg, first, other, "Still there?")
    await answered_once(cluster, tg, other, "Still there?")


@contextlib.asynccontextmanager
async def table_locked(database_url: str, table: str) -> AsyncIterator[None]:
    """Hold a lock that lets others read `table` but makes any write to it wait (a long transaction)."""
    engine = create_engine(database_url, pool_size=1)
    conn = engine.connect()
    try:
        conn.execute(sql(f"LOCK TABLE {table} IN EXCLUSIVE MODE"))
        yield
    finally:
        conn.rollback()
        conn.close()
        engine.dispose()


def waiting_for_a_lock(cluster: Cluster, statement: str) -> datetime | None:
    """Since when a session of a replica waits for a lock in `statement` (e.g. "INSERT INTO llm_calls")."""
    rows = cluster.rows(
        "SELECT timezone('UTC', query_start) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND query LIKE :q",
        q=f"{statement}%",
    )
    return rows[0][0] if rows else None


async def test_a_replica_whose_event_loop_is_blocked_past_the_lease_keeps_its_chats(
    cluster: Cluster, tg: FakeTelegram, llm: FakeLLM, database_url: str
) -> None:
    chat, other = USERS[1], USERS[2]
    llm.default = held_back({})
    cluster.lease_s = LEASE_S  # a replica silent this long is taken for dead
    r = await cluster.start(2)
    blocked = r[0]
    async with table_locked(database_url, "llm_calls"):
        # The model answers at once; the replica then records the call with a synchronous INSERT on its
        # event loop, which waits for the lock: its loop is blocked, its other threads are not.
        await send(cluster, tg, blocked, chat, "Plan my trip to Lisbon")
        since = await tg.wait_for(
            lambda: waiting_for_a_lock(cluster, "INSERT INTO llm_calls"),
            timeout=60,
            what="the replica's event loop blocked on the lock",
        )

        def renewed_past_the_lease() -> bool:
            beat = heartbeat(cluster, blocked)
            return beat is not None and (beat - since).total_seconds() > 2 * LEASE_S

        await tg.wait_for(
            renewed_past_the_lease,
            timeout=60,
            what=f"{blocked.name}'s heartbeat renewed while its event loop is blocked past the lease",
        )
        assert notices(tg, chat) == [], "the blocked replica's chat was taken over"
    await answered_once(cluster, tg, chat, "Plan my trip to Lisbon")
    # It serves again, the chat and another one; the other replica never told anyone it was restarted.
    await send(cluster, tg, blocked, chat, "And a hotel?")
    await answered_once(cluster, tg, chat, "And a hotel?")
    await send(cluster, tg, blocked, other, "Still there?")
    await answered_once(cluster, tg, other, "Still there?")
    assert notices(tg, chat) == []


async def test_a_replica_frozen_past_the_lease_is_taken_over_and_does_not_answer_late(
    cluster: Cluster, tg: FakeTelegram, llm: FakeLLM
) -> None:
    chat, other = USERS[1], USERS[2]
    release = {"Plan my trip to Lisbon": asyncio.Event()}
    llm.default = held_back(release)
    cluster.lease_s = LEASE_S
    r = await cluster.start(2)
    frozen, live = r
    await send(cluster, tg, frozen, chat, "Plan my trip to Lisbon")
    await llm.wait_for_requests(1, timeout=30)
    assert frozen.process.proc is not None
    frozen.process.proc.send_signal(signal.SIGSTOP)  # every thread stops: the heartbeat too
    try:
        told = await tg.wait_for(
            lambda: notices(tg, chat), timeout=30 + 3 * LEASE_S, what="the other replica taking the chat over"
        )
        assert "Plan my trip to Lisbon" in told[0]
        # The model's answer reaches the frozen replica's socket: it is the first thing it reads on waking.
        release["Plan my trip to Lisbon"].set()
        await tg.wait_for(lambda: llm.active == 0, timeout=30, what="the model's answer sent")
    finally:
        frozen.process.proc.send_signal(signal.SIGCONT)
    # Its next message, through the replica that was frozen: answered once, after the old turn is settled
    # (the chat's turns run in order), and the late answer never comes.
    await send(cluster, tg, frozen, chat, "And a hotel?")
    await answered_once(cluster, tg, chat, "And a hotel?")
    assert cluster.texts(chat, answer_of("Plan my trip to Lisbon")) == 0, "the frozen replica answered late"
    assert len(notices(tg, chat)) == 1
    await send(cluster, tg, frozen, other, "Still there?")
    await answered_once(cluster, tg, other, "Still there?")
    await send(cluster, tg, live, other, "And you?")
    await answered_once(cluster, tg, other, "And you?")
