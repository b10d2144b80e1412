"""The one schema a restore accepts: exactly what the migrations make at the backup's revision.

A backup's database is a SQLite file anyone who holds the backup can rewrite, checksums and encryption
included; a trigger or a view added to it would run inside the restored bot (say, copying the owner's new
messages into another user's memories). So every table, index, trigger and view of the backup's database
(sqlite_master's type, name, table and SQL, whitespace normalised) is compared with a database freshly
migrated to the same Alembic revision by this code's migrations, and anything else is refused.
"""

from __future__ import annotations

import re
import sqlite3
import tempfile
from pathlib import Path
from urllib.parse import quote

from core_tools.backup.manifest import BackupError
from db.engine import sqlite_module
from db.migrate import upgrade
from db.snapshot import sqlite_url

SQLITE_MAGIC = b"SQLite format 3\x00"
Entry = tuple[str, str, str, str]  # type, name, table, normalised SQL
# Kept by SQLite itself (ANALYZE, PRAGMA optimize): statistics, never code.
STATISTICS = {"sqlite_stat1", "sqlite_stat2", "sqlite_stat3", "sqlite_stat4"}
# The vector index is rebuilt for the embedder's dimension (db/memory_vectors.py): its width may differ.
VECTOR_TABLES = {"memories_vec", "memories_vec_center"}
WIDTH = re.compile(r"\b(bit|float|int8)\[\d+\]")

_expected: dict[str | None, frozenset[Entry]] = {}


def is_sqlite(path: Path) -> bool:
    """Whether a file starts as a SQLite database does."""
    try:
        with path.open("rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def file_uri(path: Path, query: str) -> str:
    """A SQLite URI of a file (its path percent-encoded) with a query such as `mode=ro`."""
    return f"file:{quote(str(path), safe='/')}?{query}"


def open_read_only(path: Path, query: str = "mode=ro") -> sqlite3.Connection:
    """A connection that cannot change the file, and does not run what its schema defines."""
    conn: sqlite3.Connection = sqlite_module().connect(file_uri(path, query), uri=True)
    conn.execute("PRAGMA query_only=ON")
    conn.execute("PRAGMA trusted_schema=OFF")
    return conn


def _normal(kind: str, name: str, sql: str | None) -> str:
    text = re.sub(r"\s+", " ", sql or "").strip()
    if kind == "table" and name in VECTOR_TABLES:
        text = WIDTH.sub(r"\1[N]", text)
    return text


def schema_of(conn: sqlite3.Connection) -> frozenset[Entry]:
    """Every table, index, trigger and view of a database, normalised."""
    rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    return frozenset(
        (str(kind), str(name), str(table), _normal(str(kind), str(name), sql))
        for kind, name, table, sql in rows
        if not (kind == "table" and name in STATISTICS)
    )


def expected_schema(revision: str | None) -> frozenset[Entry]:
    """The schema of a database freshly migrated to `revision` (none at all without a revision)."""
    if revision not in _expected:
        if revision is None:
            _expected[revision] = frozenset()
        else:
            with tempfile.TemporaryDirectory(prefix="assistant-schema-") as folder:
                path = Path(folder) / "reference.sqlite"
                upgrade(sqlite_url(path), revision)
                conn = open_read_only(path)
                try:
                    _expected[revision] = schema_of(conn)
                finally:
                    conn.close()
    return _expected[revision]


def _describe(entry: Entry) -> str:
    kind, name, table, _ = entry
    return f"{kind} {name}" + (f" on {table}" if table != name else "")


def check_schema(database: Path, revision: str | None) -> None:
    """Refuse a backup's database whose schema is not the migrations' at `revision`, naming the first
    difference; also one that is not a SQLite database."""
    if not is_sqlite(database):
        raise BackupError("the database in the backup is not a SQLite database: it is damaged or forged")
    try:
        conn = open_read_only(database)
        try:
            found = schema_of(conn)
        finally:
            conn.close()
    except sqlite_module().DatabaseError as exc:
        raise BackupError(f"the database in the backup cannot be read ({exc})") from None
    expected = expected_schema(revision)
    if found == expected:
        return
    extra = sorted(found - expected)
    missing = sorted(expected - found)
    changed = {e[:3] for e in extra} & {e[:3] for e in missing}
    if changed:
        what = f"its {_describe(next(e for e in extra if e[:3] in changed))} is not the migrations'"
    elif extra:
        what = f"it has a {_describe(extra[0])} the migrations do not make"
    else:
        what = f"it lacks the {_describe(missing[0])} the migrations make"
    more = len(set(extra) | set(missing)) - (2 if changed else 1)
    raise BackupError(
        f"the database in the backup is not of the schema the migrations make at revision {revision}: "
        f"{what}" + (f" (and {more} more difference(s))" if more > 0 else "") + "; it is refused"
    )
