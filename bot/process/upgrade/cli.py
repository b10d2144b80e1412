"""`python -m bot upgrade` and `python -m bot rollback`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from bot.config.settings import Settings
from bot.process.logs import Redactor
from bot.process.upgrade.errors import UpgradeFailed

COMMANDS = ("upgrade", "rollback")
Say = Callable[[str], None]


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the subcommands to `python -m bot`'s parser."""
    sub.add_parser(
        "upgrade",
        help="upgrade the database to this code: a backup, then the migrations and a self-test on a copy, "
        "then the live database",
    )
    rollback = sub.add_parser(
        "rollback", help="restore the database of the last upgrade's backup (the bot must be stopped)"
    )
    rollback.add_argument("--identity", metavar="KEYFILE", help="the age key file of an encrypted backup")


def say(line: str) -> None:
    """One line of output, at once."""
    print(line, flush=True)


def run_upgrade(settings: Settings) -> int:
    """`python -m bot upgrade`: 0 when upgraded (or at head already), 1 with one line when it failed."""
    from bot.process.upgrade.notify import tell_owner
    from bot.process.upgrade.run import checked_upgrade
    from bot.runtime.version import code_version

    redact = Redactor(settings.secrets()).mask
    try:
        outcome = checked_upgrade(settings, lambda line: say(redact(line)))
    except UpgradeFailed as exc:
        print(redact(exc.line()), file=sys.stderr, flush=True)
        tell_owner(settings, exc.line())
        return 1
    if not outcome.done:
        say(
            f"the database is at schema revision {outcome.to_revision}, this code's ({code_version()}): "
            "nothing to upgrade"
        )
    elif _running(settings):
        say("a bot (of the older code) is running on the database: restart it so that it runs this code")
    return 0


def _running(settings: Settings) -> int:
    from db.engine import make_engine
    from db.snapshot import live_processes

    engine = make_engine(settings.database_url)
    try:
        with engine.connect() as conn:
            return live_processes(conn, settings.replica_lease_s)
    except Exception:  # only a hint
        return 0
    finally:
        engine.dispose()


def run_rollback(settings: Settings, identity: str | None) -> int:
    """`python -m bot rollback`: restore the last upgrade's backup at its own schema revision."""
    from bot.process.ops import sqlite_path
    from bot.process.upgrade.inuse import sqlite_in_use

    redact = Redactor(settings.secrets()).mask
    file = sqlite_path(settings.database_url)
    if file is not None and sqlite_in_use(file):  # before this process opens it (see inuse.py)
        print(f"Rollback refused: {file} is open in a running bot: stop it, then roll back.", file=sys.stderr)
        return 1
    try:
        return _rollback(settings, identity, lambda line: say(redact(line)))
    except Exception as exc:  # one line, never a traceback
        from core_tools.backup.manifest import BackupError

        if isinstance(exc, BackupError):  # found out before anything was touched
            line = f"Rollback refused: {exc}. Nothing was changed."
        else:  # a fault the checks did not name, possibly while the backup was put in place
            line = (
                f"Rollback failed: {type(exc).__name__}: {str(exc)[:300]}. The backup in "
                f"{settings.backup_dir} is intact: `python -m bot restore` with it (and --force) puts it in "
                "place."
            )
        print(redact(line), file=sys.stderr)
        return 1


def _rollback(settings: Settings, identity: str | None, out: Say) -> int:
    from bot.process.ops import sqlite_path
    from core_tools.backup.crypto import load_identities
    from core_tools.backup.manifest import BackupError
    from core_tools.backup.restore import Target, restore
    from core_tools.backup.store import scratch_parent
    from db.engine import make_engine
    from db.upgrades import last_upgrade

    if file_missing(settings):
        raise BackupError(f"there is no database at {settings.database_url}")
    engine = make_engine(settings.database_url)
    try:
        last = last_upgrade(engine)
    finally:
        engine.dispose()
    if last is None or last.backup is None:
        raise BackupError("the database holds no record of an upgrade: there is nothing to roll back")
    source = Path(settings.backup_dir) / last.backup
    if not source.is_dir():
        raise BackupError(f"the last upgrade's backup {last.backup} is not in {settings.backup_dir} any more")
    file = sqlite_path(settings.database_url)
    work = (
        file.parent
        if file is not None
        else scratch_parent(settings.database_url, settings.media_dir, settings.backup_dir)
    )
    target = Target(settings.database_url, Path(settings.media_dir), work)
    when = last.upgraded_at.strftime("%Y-%m-%d %H:%M UTC")
    out(
        f"rolling back the upgrade of {when} (schema {last.from_revision} -> {last.to_revision}, "
        f"to {last.to_version}): restoring backup {last.backup}"
    )
    manifest = restore(
        source,
        target,
        load_identities(Path(identity)) if identity else [],
        force=True,
        lease_s=settings.replica_lease_s,
        say=out,
        migrate=False,
    )
    belongs = last.from_version or (
        f"the version that ran before it (not recorded), whose newest migration is {last.from_revision}"
    )
    out(
        f"rolled back: the database is at schema revision {manifest.contents.schema_revision} again, as "
        f"backup {manifest.name} of {manifest.contents.created_at} holds it. It belongs to the code before "
        f"{last.to_version}: {belongs}. Run that version (git checkout of it, or its Docker image); "
        "starting this one again upgrades the database again."
    )
    return 0


def file_missing(settings: Settings) -> bool:
    """A SQLite DATABASE_URL whose file does not exist."""
    from bot.process.ops import sqlite_path

    file = sqlite_path(settings.database_url)
    return file is not None and not file.exists()


def dispatch(settings: Settings, args: argparse.Namespace) -> int:
    """Run one of COMMANDS."""
    if args.command == "upgrade":
        return run_upgrade(settings)
    return run_rollback(settings, args.identity)
