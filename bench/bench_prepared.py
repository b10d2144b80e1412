"""What a `Prepared` statement saves over `Connection.execute` (db/prepared.py; docs/database.md).

    uv run python bench/bench_prepared.py              # SQLite file, 50-message history
    uv run python bench/bench_prepared.py --postgres   # an embedded PostgreSQL 18 (tests/support/postgres.py)
    uv run python bench/bench_prepared.py --n 5000

Runs three of a plain turn's statements both ways on one connection, a transaction per round (as a turn's
blocks in db/connections.py): the history read (50 rows), the open-session lookup (one row) and a
message's status update. Prints microseconds per statement, median of 7 rounds; it is not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from db.conversation_records import TurnClosing, TurnOpening
from db.conversation_statements import HISTORY_RUN, OPEN_SESSION_RUN, SET_STATUS_RUN
from db.conversations import Conversations
from db.engine import make_engine, make_sessionmaker
from db.migrate import upgrade
from db.prepared import Prepared
from db.speakers import Speaker


def _both(conn: Connection, ways: tuple[Callable[[], object], ...], n: int) -> list[float]:
    """µs per call of each way: 7 rounds, alternating, each round its own transaction (rolled back: on
    PostgreSQL thousands of updates of one row in one transaction slow each next one down)."""
    rounds: list[list[float]] = [[] for _ in ways]
    for _ in range(7):
        for fn, times in zip(ways, rounds, strict=True):
            with conn.begin() as transaction:
                fn()  # compiled (and the pages read) once
                start = time.perf_counter()
                for _ in range(n):
                    fn()
                times.append((time.perf_counter() - start) / n * 1e6)
                transaction.rollback()
    return [statistics.median(t) for t in rounds]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000, help="calls per round")
    parser.add_argument("--postgres", action="store_true", help="on an embedded PostgreSQL, not SQLite")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = None
        if args.postgres:
            from tests.support.postgres import TestPostgres

            server = TestPostgres(Path(tempfile.mkdtemp(prefix="bench-prepared-pg-")))
            url = server.new_database()
        else:
            url = f"sqlite:///{Path(tmp) / 'bench.sqlite'}"
            upgrade(url)
        engine = make_engine(url)
        conv = Conversations(make_sessionmaker(engine), engine)
        for i in range(25):  # 50 messages: 25 turns of a question and an answer
            opened = conv.open_turn(TurnOpening(Speaker(7, 7, "private"), texts=((f"question {i}", None),)))
            conv.close_turn(TurnClosing(opened.session.id, 7, 7, tuple(opened.message_ids), "answered", None))
            conv.add_message(opened.session.id, 7, 7, "assistant", f"answer {i}")
        sid, mid = opened.session.id, opened.message_ids[0]
        cases: list[tuple[str, Prepared, dict[str, Any]]] = [
            ("history, 50 rows", HISTORY_RUN, {"sid": sid, "lim": 50}),
            ("open session, 1 row", OPEN_SESSION_RUN, {"uid": 7, "cid": 7}),
            ("set status, no rows", SET_STATUS_RUN, {"mid": mid, "new_status": "answered"}),
        ]
        with engine.connect() as conn:
            print(f"{'statement':24} {'execute µs':>11} {'Prepared µs':>12} {'saved':>7}")
            for name, prepared, params in cases:
                returns = name != "set status, no rows"

                def core(
                    c: Connection = conn,
                    p: dict[str, Any] = params,
                    s: Prepared = prepared,
                    r: bool = returns,
                ) -> Any:
                    result = c.execute(s.statement, p)
                    return result.all() if r else result.rowcount

                def fast(
                    c: Connection = conn,
                    p: dict[str, Any] = params,
                    s: Prepared = prepared,
                    r: bool = returns,
                ) -> Any:
                    return s.rows(c, p) if r else s.run(c, p)

                a, b = _both(conn, (core, fast), args.n)
                print(f"{name:24} {a:11.1f} {b:12.1f} {100 * (a - b) / a:6.0f}%")
        engine.dispose()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
