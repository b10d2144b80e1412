"""The replica tables on each database: an update is handled once, a chat and a job have one live holder,
a dead process's chats and jobs are free, a chat with waiting messages is never let go silently."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine, update

from db.inbox import Inbox
from db.models import Replica, utcnow
from db.replicas import Cluster

LEASE = timedelta(seconds=15)


def cluster_of(engine: Engine, *names: str) -> Cluster:
    """A Cluster with processes `names` registered and alive."""
    cluster = Cluster(engine, LEASE)
    for n, name in enumerate(names):
        cluster.join(name, "host/boot", 100 + n, "1")
    return cluster


def age(engine: Engine, name: str, by: timedelta) -> None:
    """Make a process's heartbeat older (it stopped beating `by` ago)."""
    with engine.begin() as conn:
        conn.execute(update(Replica).where(Replica.id == name).values(heartbeat_at=utcnow() - by))


def test_an_update_is_handled_once(engine: Engine) -> None:
    cluster = cluster_of(engine)
    assert cluster.first_delivery(10_000_000_001)
    assert not cluster.first_delivery(10_000_000_001)  # a duplicate or a retried delivery
    assert cluster.first_delivery(10_000_000_002)


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
    waiting = inbox.put(1, 7, "private", "hello")  # stored by b, which found the chat taken
    assert not cluster.release_chat(7, "a", only_if_idle=True)
    assert cluster.orphans(10) == []  # a still drives it: nobody else takes it
    inbox.discard([waiting])
    assert cluster.release_chat(7, "a", only_if_idle=True)
    inbox.put(1, 7, "private", "again")
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
