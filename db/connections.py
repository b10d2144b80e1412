"""The turn's short transactions on a SQLite connection the thread keeps, not one taken from the pool.

A plain turn opens about nine short transactions on the event loop. Taking a connection from SQLAlchemy's
pool and giving it back (a `Connection` built, the pool's checkout and its reset on return) cost about as
much as a short statement each time (bench/bench_chat.py; docs/design-notes.md, "The turn's statements").
For SQLite, `begin` and `read` use one connection per thread instead, kept until the engine is disposed;
each block is still its own transaction, committed or rolled back when it ends, so nothing is held open
between them (a reader never pins the WAL). A block inside another block of the same thread (rare, not on
the turn's path) takes a connection from the pool as before. PostgreSQL's connections always come from the
pool: its calls run in worker threads, and the pool's checks (pre-ping, invalidation) are worth having there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from sqlalchemy import Connection, Engine, event

_lock = threading.Lock()
_held: dict[Engine, dict[int, _Held]] = {}  # engine -> thread id -> its connection


class _Held:
    __slots__ = ("busy", "conn")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.busy = False


def _mine(engine: Engine) -> _Held | None:
    """This thread's connection to a SQLite engine (made on first use), or None for PostgreSQL."""
    threads = _held.get(engine)
    if threads is not None:
        found = threads.get(threading.get_ident())
        if found is not None:
            return found
    if engine.dialect.name != "sqlite":
        return None
    with _lock:
        if engine not in _held:
            _held[engine] = {}
            if not event.contains(engine, "engine_disposed", _let_go):  # (an engine may be used again)
                event.listen(engine, "engine_disposed", _let_go)
        held = _held[engine][threading.get_ident()] = _Held(engine.connect())
    return held


def _let_go(engine: Engine) -> None:
    """The engine is disposed: close the connections its threads kept."""
    with _lock:
        threads = _held.pop(engine, {})
    for held in threads.values():
        held.conn.invalidate()  # closed, not given back to the pool the engine just replaced
        held.conn.close()


@contextmanager
def _block(engine: Engine, *, keep: bool) -> Iterator[Connection]:
    """One transaction on this thread's kept connection (the pool's when there is none or it is in use):
    committed when the block ends if `keep`, else rolled back; rolled back if the block raises."""
    held = _mine(engine)
    if held is None or held.busy:
        with engine.begin() if keep else engine.connect() as conn:
            yield conn
        return
    held.busy = True
    try:
        with held.conn.begin() as transaction:
            yield held.conn
            if not keep:
                transaction.rollback()
    finally:
        held.busy = False


def begin(engine: Engine) -> AbstractContextManager[Connection]:
    """A write transaction, committed when the block ends (rolled back if it raises): `engine.begin()`."""
    return _block(engine, keep=True)


def read(engine: Engine) -> AbstractContextManager[Connection]:
    """A read, its transaction rolled back when the block ends: `engine.connect()`."""
    return _block(engine, keep=False)
