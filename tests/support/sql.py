"""What SQL an engine runs while a block runs (its cursor events: SQLAlchemy's own and db/prepared.py's)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, event


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    """The SQL statements run on `engine` (any thread) while the block runs."""
    seen: list[str] = []
    lock = threading.Lock()

    def before(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        with lock:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", before)
