"""A database made by the previous release's migrations with real rows, the environment of a `python -m
bot upgrade` process, and a copy of the checkout with a migration that fails (the way the code ships)."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import text

from db.engine import make_engine
from db.migrate import downgrade, upgrade
from tests.backup.helpers import counts, fill, message_texts
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, TOKEN
from tests.support.processes import REPO, bot_env

PREVIOUS = "0027"  # the revision of the release before this one
# What `python -m bot` needs of the checkout (as the Docker image copies it).
SHIPPED = ("bot", "core_tools", "db", "migrations", "sandbox", "scripts", "alembic.ini", "pyproject.toml")


@dataclass
class OldDatabase:
    """A database at PREVIOUS with a user's turns, memories with vectors, a schedule and a media file."""

    url: str
    data: Path  # MEDIA_DIR and BACKUP_DIR are in here
    kind: str

    @property
    def media(self) -> Path:
        return self.data / "media"

    @property
    def backups(self) -> Path:
        return self.data / "backups"

    def file(self) -> Path:
        """The SQLite file."""
        assert self.kind == "sqlite"
        return Path(self.url.removeprefix("sqlite:///"))

    def revision(self) -> str | None:
        engine = make_engine(self.url)
        try:
            with engine.connect() as conn:
                return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        finally:
            engine.dispose()

    def counts(self) -> dict[str, int]:
        engine = make_engine(self.url)
        try:
            return counts(engine)
        finally:
            engine.dispose()

    def texts(self) -> list[str]:
        engine = make_engine(self.url)
        try:
            return message_texts(engine)
        finally:
            engine.dispose()

    def digest(self) -> str:
        """SQLite: the SHA-256 of the file and of a -wal beside it."""
        digest = hashlib.sha256(self.file().read_bytes())
        wal = Path(f"{self.file()}-wal")
        if wal.exists():
            digest.update(wal.read_bytes())
        return digest.hexdigest()


async def make_old_database(db_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> OldDatabase:
    """A database migrated to PREVIOUS only, filled with two users' rows and files."""
    data = tmp_path / "data"
    data.mkdir(parents=True, exist_ok=True)
    if db_kind == "sqlite":
        url = f"sqlite:///{data / 'assistant.db'}"
    else:
        postgres = request.getfixturevalue("postgres")
        url = postgres.new_database(migrated=False)
        request.addfinalizer(lambda: postgres.drop_database(url))
    # Filled by this code (which reads columns PREVIOUS lacks, e.g. memories.speaker), then taken back to
    # PREVIOUS by the migrations' own downgrades: the rows of an older release, at its revision.
    upgrade(url)
    engine = make_engine(url)
    try:
        await fill(engine, data / "media", OWNER)
        await fill(engine, data / "media", OWNER + 1, messages=4)
    finally:
        engine.dispose()
    downgrade(url, PREVIOUS)
    return OldDatabase(url, data, db_kind)


def upgrade_env(home: Path, db: OldDatabase, tg: FakeTelegram | None = None, **values: str) -> dict[str, str]:
    """A clean environment for `python -m bot upgrade|rollback|doctor` on `db`, the owner reachable
    through the fake Bot API when one is given."""
    env = bot_env(
        home,
        DATABASE_URL=db.url,
        MEDIA_DIR=str(db.media),
        BACKUP_DIR=str(db.backups),
        OPENAI_API_KEY="sk-test",
        ALLOWED_USER_IDS=str(OWNER),
    )
    if tg is not None:
        env.update(TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_API_BASE_URL=tg.base_url)
    env.update(values)
    return env


RAISES = 'raise RuntimeError("this test migration fails on purpose")'
LOSES_MEMORIES = 'op.execute("DELETE FROM memories")  # succeeds, and loses every memory'
FAILING = '''"""A migration that breaks the upgrade, for the upgrade's tests only (never in the checkout)."""

from alembic import op

revision = "0999"
down_revision = "{head}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    {body}


def downgrade() -> None:
    pass
'''


def checkout_with_failing_migration(where: Path, head: str, body: str = RAISES) -> Path:
    """A copy of the checkout's shipped code with one more migration, after `head`, whose upgrade runs
    `body` (by default: it raises)."""
    where.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SHIPPED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, where / name, ignore=ignore)
        else:
            shutil.copy2(source, where / name)
    (where / "migrations" / "versions" / "0999_fails_on_purpose.py").write_text(
        FAILING.format(head=head, body=body)
    )
    return where


def trial_databases(postgres_admin_uri: str) -> list[str]:
    """The scratch databases of upgrades left on the server."""
    import psycopg

    with psycopg.connect(postgres_admin_uri, autocommit=True) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE '%upgrade_trial'").fetchall()
    return [str(r[0]) for r in rows]


def backups_in(folder: Path) -> Iterator[Path]:
    """The manifests of the backups in BACKUP_DIR."""
    return iter(sorted(folder.glob("*/*.manifest.json")))
