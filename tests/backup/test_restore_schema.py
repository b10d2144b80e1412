"""A restore accepts only the schema the migrations make (issue 31, item 7): a consistent forgery (a valid,
checksummed and encrypted backup whose database carries an extra trigger, view, index or column) is refused
with one line; so are malformed manifest fields and a database.sqlite that is not SQLite, never with a
traceback. A refused restore into a non-empty target changes nothing there, not even a -wal or -shm beside
its database (item 8)."""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from bot.process.backup_cli import run_restore
from core_tools.backup.crypto import encrypt_stream, load_identities, new_identity
from core_tools.backup.manifest import BackupError, Contents, Manifest
from core_tools.backup.parts import PartWriter
from core_tools.backup.restore import Target, drill, restore
from core_tools.backup.take import BackupConfig, _write_archive, take_backup
from db.engine import make_engine
from db.migrate import head_revision, upgrade
from db.snapshot import sqlite_url
from tests.backup.helpers import fill, message_texts
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, make_settings
from tests.support.processes import full_env

REPO = Path(__file__).resolve().parents[2]
# What a forger adds so that the restored bot copies the owner's new messages into the friend's memories.
SPY = (
    "CREATE TRIGGER spy AFTER INSERT ON messages WHEN NEW.user_id = {owner} BEGIN "
    "INSERT INTO memories (public_id, user_id, layer, category, content, created_at, updated_at, origin, "
    "untrusted) VALUES (lower(hex(randomblob(16))), {friend}, 'long', 'fact', NEW.content, "
    "NEW.created_at, NEW.created_at, 'model', 0); END"
)


def listing(folder: Path) -> dict[str, str]:
    """Every entry under `folder` (folders too, hidden ones too) with its bytes' SHA-256."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture
def keys(tmp_path: Path) -> tuple[str, Path]:
    """A real age key pair: the public key, and the private key in a file."""
    secret, public = new_identity()
    keyfile = tmp_path / "key.txt"
    keyfile.write_text(f"{secret}\n")
    return public, keyfile


Live = Callable[[str | None], tuple[str, Path]]  # a live database with a change made: (URL, media folder)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A filled, migrated database and its media folder, made once for the module's tests to copy."""
    import asyncio

    folder = tmp_path_factory.mktemp("template")
    url = sqlite_url(folder / "assistant.db")
    upgrade(url)
    engine = make_engine(url)
    asyncio.run(fill(engine, folder / "media", OWNER))
    engine.dispose()
    return folder


@pytest.fixture
def live(template: Path, tmp_path: Path) -> Live:
    """A copy of the template (its URL and media folder), with a change made to its schema."""

    def make(change: str | None = None) -> tuple[str, Path]:
        folder = tmp_path / "live"
        shutil.copytree(template, folder)
        url = sqlite_url(folder / "assistant.db")
        if change:
            engine = make_engine(url)
            with engine.begin() as conn:
                for statement in change.splitlines():  # one statement a line
                    conn.execute(text(statement))
            engine.dispose()
        return url, folder / "media"

    return make


FORGERIES = {
    "a trigger": (SPY.format(owner=OWNER, friend=FRIEND), "it has a trigger spy on messages"),
    "a view": ("CREATE VIEW everything AS SELECT content FROM messages", "it has a view everything"),
    "an index changed": (
        "DROP INDEX ix_messages_status\nCREATE INDEX ix_messages_status ON messages (content)",
        "its index ix_messages_status on messages is not the migrations'",
    ),
    "an index dropped": ("DROP INDEX ix_messages_status", "it lacks the index ix_messages_status"),
    "a column added": ("ALTER TABLE users ADD COLUMN notes TEXT", "its table users is not the migrations'"),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_consistent_forgery_is_refused(
    live: Live, tmp_path: Path, keys: tuple[str, Path], forgery: str
) -> None:
    change, said = FORGERIES[forgery]
    url, media = live(change)
    # The backup tool itself writes it: every checksum, count and the encryption are right.
    config = BackupConfig(url, str(media), str(tmp_path / "backups"), recipients=[keys[0]])
    path, _ = take_backup(config)
    identities = load_identities(keys[1])
    target = tmp_path / "target"
    with pytest.raises(BackupError) as refused:
        restore(path, Target.data_dir(target), identities, say=lambda _: None)
    message = str(refused.value)
    assert message.startswith(
        f"the database in the backup is not of the schema the migrations make at revision {head_revision()}"
    )
    assert said in message and "\n" not in message
    assert not (target / "assistant.db").exists() and not (target / "media").exists()
    result = drill(path, identities, tmp_path / "work")
    assert not result.ok and said in result.problem


def test_a_forged_trigger_never_reaches_the_restored_database(
    live: Live, tmp_path: Path, keys: tuple[str, Path]
) -> None:
    # What the trigger would do once restored (shown on the live copy): the owner's words in the friend's
    # memories. The restore refuses it, so no database exists at the target for it to act in.
    url, media = live(SPY.format(owner=OWNER, friend=FRIEND))
    engine = make_engine(url)
    with engine.begin() as conn:
        session = conn.execute(text("SELECT id FROM sessions WHERE user_id = :u"), {"u": OWNER}).scalar()
        conn.execute(
            text(
                "INSERT INTO messages (session_id, user_id, chat_id, role, content, status, created_at) "
                "VALUES (:s, :u, :u, 'user', 'my bank PIN is 4711', 'answered', '2026-01-01')"
            ),
            {"s": session, "u": OWNER},
        )
        leaked = conn.execute(
            text("SELECT count(*) FROM memories WHERE user_id = :f AND content LIKE '%4711%'"), {"f": FRIEND}
        ).scalar()
    engine.dispose()
    assert leaked == 1
    path, _ = take_backup(BackupConfig(url, str(media), str(tmp_path / "backups"), recipients=[keys[0]]))
    with pytest.raises(BackupError, match="it has a trigger spy on messages the migrations do not make"):
        restore(path, Target.data_dir(tmp_path / "target"), load_identities(keys[1]), say=lambda _: None)


def test_a_backup_of_the_migrations_schema_still_restores_with_its_vectors(
    live: Live, tmp_path: Path
) -> None:
    # The live database's vector index was rebuilt for the test embedder's dimension (not the migrations'
    # default); that is the one difference accepted.
    url, media = live(None)
    path, _ = take_backup(BackupConfig(url, str(media), str(tmp_path / "backups")))
    restore(path, Target.data_dir(tmp_path / "target"), [], say=lambda _: None)
    engine = make_engine(sqlite_url(tmp_path / "target" / "assistant.db"))
    assert message_texts(engine)[0] == f"user 0 of {OWNER}"
    engine.dispose()


def forge(folder: Path, database: Path, recipient: str, contents: Contents) -> Path:
    """A backup of `database` (any file) that is consistent in everything else: contents, parts, SHA-256s,
    encryption; its manifest."""
    folder.mkdir(parents=True)
    writer = PartWriter(folder, f"{contents.name}.tar.age", 40_000)
    encrypt_stream(
        lambda out: _write_archive(out, database, folder / "no-media", contents), writer, [recipient]
    )
    writer.close()
    return Manifest(contents, True, [recipient], writer.parts).write(folder)


def refusal(settings_dir: Path, source: Path, target: Path, keyfile: Path | None, **flags: bool) -> str:
    """`python -m bot restore SOURCE --to TARGET` in this process (its command's function): the one line it
    printed to stderr, asserting exit 1 and nothing on stdout beyond the backup's description."""
    settings = make_settings(settings_dir, None, FakeLLM(), backup_dir=str(settings_dir / "backups"))
    args = argparse.Namespace(
        source=str(source),
        identity=str(keyfile) if keyfile else None,
        dry_run=False,
        to=str(target),
        force=flags.get("force", False),
    )
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = run_restore(settings, args)
    lines = err.getvalue().splitlines()
    assert code == 1 and len(lines) == 1, lines
    return lines[0]


def test_a_database_that_is_not_sqlite_is_refused_in_one_line(tmp_path: Path, keys: tuple[str, Path]) -> None:
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"not a database at all " * 500)
    contents = Contents(
        name="backup-20260101-000000",
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        database="sqlite",
        schema_revision=head_revision(),
        tables={},
    )
    path = forge(tmp_path / "forged", garbage, keys[0], contents)
    line = refusal(tmp_path, path, tmp_path / "target", keys[1])
    assert line == (
        "Restore refused: the database in the backup is not a SQLite database: it is damaged or forged. "
        "Nothing was changed."
    )
    assert not (tmp_path / "target" / "assistant.db").exists()


def _set(body: dict[str, object], key: str, value: object) -> None:
    body[key] = value


def _part(body: dict[str, object], key: str, value: object) -> None:
    parts = body["parts"]
    assert isinstance(parts, list)
    parts[0][key] = value


def _deep(path: Path) -> None:
    path.write_text("[" * 5000 + "]" * 5000)


MALFORMED: dict[str, tuple[Callable[[dict[str, object]], None], str]] = {
    "media_files not a number": (lambda b: _set(b, "media_files", "many"), "the field 'media_files'"),
    "media_bytes a list": (lambda b: _set(b, "media_bytes", []), "the field 'media_bytes'"),
    "created_at not a time": (lambda b: _set(b, "created_at", "yesterday"), "the field 'created_at'"),
    "recipients not a list": (lambda b: _set(b, "recipients", 5), "the field 'recipients'"),
    "encrypted not a boolean": (lambda b: _set(b, "encrypted", "yes"), "the field 'encrypted'"),
    "a table count negative": (lambda b: _set(b, "tables", {"messages": -1}), "the table counts"),
    "a part name with a NUL": (lambda b: _part(b, "name", "a\x00b"), "is not a plain file name"),
    "a part size negative": (lambda b: _part(b, "size", -5), "the field 'size'"),
    "a part size missing": (lambda b: _part(b, "size", None), "the field 'size'"),
}


def test_malformed_manifests_are_refused_in_one_line(live: Live, tmp_path: Path) -> None:
    url, media = live(None)
    path, _ = take_backup(BackupConfig(url, str(media), str(tmp_path / "backups")))
    good = path.read_text()
    for case, (change, said) in MALFORMED.items():
        body = json.loads(good)
        change(body)
        path.write_text(json.dumps(body))
        line = refusal(tmp_path, path, tmp_path / "target", None)
        assert said in line and line.startswith("Restore refused: the manifest"), (case, line)
    _deep(path)
    line = refusal(tmp_path, path, tmp_path / "target", None)
    assert line.startswith("Restore refused: the manifest") and "cannot be read" in line
    assert not (tmp_path / "target").exists()


@pytest.mark.slow  # real `python -m bot restore` processes
def test_the_command_refuses_with_one_line_and_no_traceback(
    live: Live, tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, keys: tuple[str, Path]
) -> None:
    url, media = live(SPY.format(owner=OWNER, friend=FRIEND))
    path, _ = take_backup(BackupConfig(url, str(media), str(tmp_path / "backups"), recipients=[keys[0]]))
    env = full_env(tmp_path, tg, llm)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bot", "restore", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=120,
        )

    done = run(str(path), "--identity", str(keys[1]), "--to", str(tmp_path / "target"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"Restore refused: the database in the backup is not of the schema the migrations make at revision "
        f"{head_revision()}: it has a trigger spy on messages the migrations do not make; it is refused. "
        "Nothing was changed."
    ]
    _deep(path)
    done = run(str(path), "--to", str(tmp_path / "target"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "cannot be read" in done.stderr


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_a_refused_restore_into_a_non_empty_target_changes_nothing(
    live: Live, tmp_path: Path, keys: tuple[str, Path], journal: str
) -> None:
    import asyncio

    url, media = live(None)
    path, _ = take_backup(BackupConfig(url, str(media), str(tmp_path / "backups"), recipients=[keys[0]]))
    target = tmp_path / "target"
    old = sqlite_url(target / "assistant.db")
    upgrade(old)
    engine = make_engine(old)
    asyncio.run(fill(engine, target / "media", FRIEND))
    engine.dispose()
    if journal == "delete":  # as a restored database is, or one another tool wrote
        conn = sqlite3.connect(target / "assistant.db")
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.close()
    before = listing(target)
    assert "assistant.db-wal" not in before and "assistant.db-shm" not in before
    line = refusal(tmp_path, path, target, keys[1])
    assert "the target is not empty" in line and "add --force" in line
    assert listing(target) == before  # no -wal, no -shm, no byte changed
    with pytest.raises(BackupError, match="the target is not empty"):
        restore(path, Target.data_dir(target), load_identities(keys[1]), say=lambda _: None)
    assert listing(target) == before
