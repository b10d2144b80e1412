"""The replica tables on each database: an update is handled once (per bot, within the dedup window), a chat
and a job have one live holder, a dead process's chats and jobs are free, a chat with waiting messages is
never let go silently, and a process learns which chats were taken from it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine, make_url, text, update
from sqlalchemy.exc import DBAPIError

from db.engine import make_engine
from db.models import JobLease, Replica, UpdateSeen, utcnow
from db.runtime import DEDUP_WINDOW, Entry, Inbox, RuntimeStore
from db.speakers import Speaker
from tests.support.databases import postgresql_only

LEASE = timedelta(seconds=15)


def cluster_of(engine: Engine, *names: str) -> RuntimeStore:
    """A RuntimeStore with processes `names` registered and alive."""
    cluster = RuntimeStore(engine, LEASE)
    for n, name in enumerate(names):
        cluster.join(name, "host/boot", 100 + n, "1")
    return cluster


def age(engine: Engine, name: str, by: timedelta) -> None:
    """Make a process's heartbeat older (it stopped beating `by` ago)."""
    with engine.begin() as conn:
        conn.execute(update(Replica).where(Replica.id == name).values(heartbeat_at=utcnow() - by))


TEST_BOT, REAL_BOT = 123456, 7_000_000_001  # the numeric ids in two bots' tokens


def test_an_update_is_handled_once(engine: Engine) -> None:
    cluster = cluster_of(engine)
    assert cluster.first_delivery(TEST_BOT, 10_000_000_001)
    assert not cluster.first_delivery(TEST_BOT, 10_000_000_001)  # a duplicate or a retried delivery
    assert cluster.first_delivery(TEST_BOT, 10_000_000_002)


def test_an_update_id_is_a_duplicate_only_for_its_bot_and_within_the_window(engine: Engine) -> None:
    cluster = cluster_of(engine)
    assert cluster.first_delivery(TEST_BOT, 10000)
    assert cluster.first_delivery(REAL_BOT, 10000)  # the token switched: the new bot's first update
    assert not cluster.first_delivery(REAL_BOT, 10000)
    # Seen longer ago than a duplicate can arrive (Telegram keeps an update a day; after a week without
    # updates it starts again from a random id): a new update, even before pruning forgets the old one.
    with engine.begin() as conn:
        conn.execute(
            update(UpdateSeen)
            .where(UpdateSeen.bot_id == TEST_BOT)
            .values(seen_at=utcnow() - DEDUP_WINDOW - timedelta(minutes=1))
        )
    assert cluster.first_delivery(TEST_BOT, 10000)
    assert not cluster.first_delivery(TEST_BOT, 10000)  # and remembered again from now on
    assert timedelta(hours=24) <= DEDUP_WINDOW  # no shorter than Telegram keeps an update


def test_pruning_forgets_updates_past_the_window_only(engine: Engine) -> None:
    cluster = cluster_of(engine)
    assert cluster.first_delivery(TEST_BOT, 1) and cluster.first_delivery(TEST_BOT, 2)
    with engine.begin() as conn:
        conn.execute(
            update(UpdateSeen)
            .where(UpdateSeen.update_id == 1)
            .values(seen_at=utcnow() - DEDUP_WINDOW - timedelta(minutes=1))
        )
    assert cluster.prune() == (0, 1)
    assert not cluster.first_delivery(TEST_BOT, 2)


def test_a_chat_has_one_live_holder_and_a_dead_ones_chat_is_free(engine: Engine) -> None:
    cluster = cluster_of(engine, "a", "b")
    assert cluster.claim_chat(-100123, "a")
    assert not cluster.claim_chat(-100123, "b")
    age(engine, "a", LEASE / 2)
    assert not cluster.claim_chat(-100123, "b")  # still alive
    age(engine, "a", LEASE * 2)
    assert cluster.claim_chat(-100123, "b")  # a is dead: b takes its chat
    assert cluster.beat("b") and not cluster.claim_chat(-100123, "a")


def test_a_chat_with_waiting_messages_is_not_let_go_when_asked_only_if_idle(engine: Engine) -> None:
    cluster = cluster_of(engine, "a", "b")
    inbox = Inbox(engine)
    assert cluster.claim_chat(7, "a")
    waiting = inbox.put(Entry(Speaker(1, 7, "private"), "hello"))  # stored by b, which found the chat taken
    assert cluster.release_chat(7, "a", only_if_idle=True) == "waiting"
    assert cluster.orphans(10) == []  # a still drives it: nobody else takes it
    inbox.discard([waiting])
    assert cluster.release_chat(7, "a", only_if_idle=True) == "released"
    inbox.put(Entry(Speaker(1, 7, "private"), "again"))
    assert cluster.orphans(10) == [7]  # free with a message waiting: any process takes it


def test_a_job_stays_with_its_holder_until_it_dies(engine: Engine) -> None:
    cluster = cluster_of(engine, "a", "b")
    assert cluster.claim_job("reminders", "a")
    assert not cluster.claim_job("reminders", "b")
    assert cluster.claim_job("reminders", "a")  # sticky
    age(engine, "a", LEASE * 2)
    assert cluster.claim_job("reminders", "b")
    assert not cluster.claim_job("reminders", "a")


def test_a_stop_reaches_the_holder_of_the_running_turn(engine: Engine) -> None:
    cluster = cluster_of(engine, "a", "b")
    assert cluster.claim_chat(7, "a")
    cluster.start_turn(7, "a", 123456789012, owner=1)
    running = cluster.running(7)
    assert running is not None and (running.holder, running.turn, running.owner) == ("a", 123456789012, 1)
    assert not cluster.request_stop(7, 99)  # another turn: nothing asked
    assert cluster.request_stop(7, 123456789012)
    assert cluster.stops_for("a") == [(7, 123456789012)] and cluster.stops_for("b") == []
    cluster.end_turn(7, "a")
    assert cluster.running(7) is None and cluster.stops_for("a") == []


def test_a_process_that_leaves_frees_everything(engine: Engine) -> None:
    cluster = cluster_of(engine, "a", "b")
    assert cluster.claim_chat(7, "a") and cluster.claim_job("rollover", "a")
    cluster.forget(["a"])
    assert cluster.claim_chat(7, "b") and cluster.claim_job("rollover", "b")
    assert not cluster.beat("a")  # a's row is gone: it would register again


def test_a_process_taken_for_dead_learns_which_chats_it_lost(engine: Engine) -> None:
    cluster = cluster_of(engine, "a", "b")
    assert cluster.claim_chat(7, "a") and cluster.claim_chat(8, "a")
    age(engine, "a", LEASE * 2)  # a was silent past the lease (frozen): b takes one of its chats
    assert cluster.claim_chat(7, "b")
    assert cluster.beat("a")  # a is back
    assert cluster.chats_of("a") == {8} and cluster.chats_of("b") == {7}
    assert not cluster.claim_chat(8, "b")  # alive again: what it still holds stays its own
    # Letting go of the chat it lost touches b's lease not at all.
    assert cluster.release_chat(7, "a", only_if_idle=True) == "not held"
    assert cluster.release_chat(7, "a") == "not held"
    assert cluster.chats_of("b") == {7}


@postgresql_only
def test_a_process_frozen_in_a_transaction_does_not_hold_a_lease_row_forever(database_url: str) -> None:
    # Process a (alive by its heartbeat) holds the reminders job, then freezes in the middle of a
    # transaction that locked the job's row. Its session is ended once it has idled there for the engine's
    # limit, which lets go of the lock: process b's look at the job goes on instead of waiting behind it.
    frozen = make_engine(database_url, idle_in_transaction_s=1)
    # b gives up on a lock after 60 s (a URL option, kept beside the engine's own): without the limit
    # above this test fails there instead of hanging.
    with_option = make_url(database_url).update_query_dict({"options": "-c lock_timeout=60000"})
    other = make_engine(with_option.render_as_string(hide_password=False))
    try:
        a, b = cluster_of(frozen, "a"), cluster_of(other, "b")
        assert a.claim_job("reminders", "a")
        conn = frozen.connect()
        conn.begin()
        conn.execute(update(JobLease).where(JobLease.name == "reminders").values(since=utcnow()))
        # ... and nothing more from a: its connection idles inside the transaction.
        assert not b.claim_job("reminders", "b")  # answered (a is alive and holds it), not stuck
        with other.connect() as check:
            assert check.execute(text("SHOW lock_timeout")).scalar() == "1min"
        with pytest.raises(DBAPIError, match="idle-in-transaction"):  # the server ended a's session
            conn.execute(text("SELECT 1"))
        conn.close()
        assert a.claim_job("reminders", "a")  # a, thawed, carries on with a new connection from its pool
    finally:
        frozen.dispose()
        other.dispose()
