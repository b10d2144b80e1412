"""A start-up with a database already at head checks it without Alembic (db/migrate.py, `at_head`); every
other database still goes through Alembic's upgrade."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from db.engine import make_engine
from db.migrate import at_head, current_revision, head_revision, script_head, upgrade
from tests.support.postgres import TestPostgres

REPO = Path(__file__).resolve().parents[2]
# A start-up's migration step alone, in a fresh interpreter: was Alembic imported, and did a migration run?
START = (
    "import logging, sys\n"
    "logging.basicConfig(level=logging.INFO)\n"
    "from db.migrate import upgrade\n"
    "upgrade(sys.argv[1])\n"
    "print('alembic' in sys.modules)"
)


@pytest.fixture
def empty_url(db_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """An empty database: a SQLite file path, or a new PostgreSQL database."""
    if db_kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'data' / 'a.db'}"
        return
    server: TestPostgres = request.getfixturevalue("postgres")
    url = server.new_database(migrated=False)
    yield url
    server.drop_database(url)


def start(url: str) -> tuple[bool, str]:
    """Run the start-up's upgrade in a new process: (Alembic was imported, its log)."""
    done = subprocess.run(
        [sys.executable, "-c", START, url], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.strip() == "True", done.stderr


def test_the_files_head_is_alembics() -> None:
    assert script_head() == head_revision() is not None


def test_a_database_at_head_is_not_migrated_again_nor_alembic_loaded(empty_url: str) -> None:
    loaded, log = start(empty_url)  # empty: Alembic runs every migration
    assert loaded and "Running upgrade  -> 0001" in log, log
    engine = make_engine(empty_url)
    assert at_head(engine) and current_revision(engine) == head_revision()
    loaded, log = start(empty_url)
    assert not loaded and "Running upgrade" not in log, log
    engine.dispose()


def test_a_database_behind_head_is_upgraded(empty_url: str) -> None:
    head = head_revision()
    assert head is not None
    previous = f"{int(head) - 1:04d}"
    upgrade(empty_url, previous)
    engine = make_engine(empty_url)
    assert current_revision(engine) == previous and not at_head(engine)
    loaded, log = start(empty_url)
    assert loaded and f"Running upgrade {previous} -> {head}" in log, log
    assert at_head(engine) and current_revision(engine) == head
    engine.dispose()


def revision_file(folder: Path, name: str, revision: str, down: str, extra: str = "") -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(
        f'"""{name}"""\n\nrevision: str = {revision}\ndown_revision: str | None = {down}\n'
        f"branch_labels = None\ndepends_on: str | None = None\n{extra}\n\ndef upgrade() -> None:\n    pass\n"
    )


def test_the_head_is_read_only_from_one_plain_chain(tmp_path: Path) -> None:
    chain = tmp_path / "chain"
    revision_file(chain, "a", '"0001"', "None")
    revision_file(chain, "b", "'0002'", '"0001"  # the second')
    revision_file(chain, "c", '"0003"', '"0002"')
    assert script_head(chain) == "0003"

    branched = tmp_path / "branched"  # two heads
    revision_file(branched, "a", '"0001"', "None")
    revision_file(branched, "b", '"0002"', '"0001"')
    revision_file(branched, "c", '"0003"', '"0001"')
    assert script_head(branched) is None

    merged = tmp_path / "merged"  # a merge revision: a tuple of parents
    revision_file(merged, "a", '"0001"', "None")
    revision_file(merged, "b", '"0002"', '"0001"')
    revision_file(merged, "c", '"0003"', '"0001"')
    revision_file(merged, "d", '"0004"', '("0002", "0003")')
    assert script_head(merged) is None

    labelled = tmp_path / "labelled"  # a branch label: left to Alembic
    revision_file(labelled, "a", '"0001"', "None")
    revision_file(labelled, "b", '"0002"', '"0001"')
    (labelled / "b.py").write_text(
        (labelled / "b.py").read_text().replace("branch_labels = None", "branch_labels = ('x',)")
    )
    assert script_head(labelled) is None

    unknown = tmp_path / "unknown"  # a parent nobody names, or a revision computed, not written
    revision_file(unknown, "a", '"0001"', "None")
    revision_file(unknown, "b", '"0002"', '"0009"')
    assert script_head(unknown) is None
    computed = tmp_path / "computed"
    revision_file(computed, "a", '"0001"', "None")
    revision_file(computed, "b", "NAME", '"0001"')
    assert script_head(computed) is None
