"""The command line of backups and users' data: `python -m bot backup` (no file: a full backup into
BACKUP_DIR), `restore`, `export-user`, `forget-user`."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from bot.config.settings import Settings
from bot.process.logs import Redactor
from core_tools.backup.crypto import load_identities, recipient_strings
from core_tools.backup.manifest import BackupError

COMMANDS = ("restore", "export-user", "forget-user")


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the subcommands to `python -m bot`'s parser."""
    restore = sub.add_parser(
        "restore", help="check a backup and restore it (the database and the media files), migrating it"
    )
    restore.add_argument("source", help="the backup: its manifest, its folder, or BACKUP_DIR (the newest)")
    restore.add_argument("--identity", metavar="KEYFILE", help="the age key file of an encrypted backup")
    restore.add_argument("--dry-run", action="store_true", help="check and unpack it, change nothing")
    restore.add_argument(
        "--to", metavar="DATA_DIR", help="restore into DATA_DIR/assistant.db and DATA_DIR/media (SQLite)"
    )
    restore.add_argument("--force", action="store_true", help="replace a target that holds data")
    export = sub.add_parser("export-user", help="write one archive of everything stored about a user")
    export.add_argument("user_id", type=int)
    export.add_argument("--out", metavar="FILE", help="the archive (default: data/export-ID-TIME.zip)")
    forget = sub.add_parser("forget-user", help="delete everything stored about a user")
    forget.add_argument("user_id", type=int)
    forget.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def say(line: str) -> None:
    """One line of output, at once."""
    print(line, flush=True)


def run_full_backup(settings: Settings) -> int:
    """`python -m bot backup` without a file: a backup as the schedule takes it, into BACKUP_DIR."""
    from core_tools.backup.take import BackupConfig, take_backup

    try:
        config = BackupConfig(
            settings.database_url,
            settings.media_dir,
            settings.backup_dir,
            settings.backup_keep,
            recipient_strings(settings.backup_age_recipients),
            settings.backup_part_bytes,
        )
        path, manifest = take_backup(config, say)
    except BackupError as exc:
        print(f"Backup failed: {exc}.", file=sys.stderr)
        return 1
    state = "encrypted" if manifest.encrypted else "NOT encrypted (set BACKUP_AGE_RECIPIENTS)"
    say(f"Backup written: {path} ({len(manifest.parts)} part(s), {manifest.size} bytes, {state}).")
    return 0


def run_restore(settings: Settings, args: argparse.Namespace) -> int:
    """`python -m bot restore`."""
    from core_tools.backup.restore import Target, restore
    from core_tools.backup.store import scratch_parent

    redact = Redactor(settings.secrets()).mask
    if args.to:
        target = Target.data_dir(Path(args.to))
    else:
        from bot.process.ops import sqlite_path

        file = sqlite_path(settings.database_url)
        # Unpacked beside a SQLite target (moved into place by a rename); for PostgreSQL in a folder beside
        # MEDIA_DIR, never in BACKUP_DIR (the backup's plaintext must not lie there).
        work = (
            file.parent
            if file is not None
            else scratch_parent(settings.database_url, settings.media_dir, settings.backup_dir)
        )
        target = Target(settings.database_url, Path(settings.media_dir), work)
    try:
        identities = load_identities(Path(args.identity)) if args.identity else []
        restore(
            Path(args.source),
            target,
            identities,
            force=args.force,
            dry_run=args.dry_run,
            lease_s=settings.replica_lease_s,
            say=lambda line: say(redact(line)),
        )
    except BackupError as exc:
        print(redact(f"Restore refused: {exc}. Nothing was changed."), file=sys.stderr)
        return 1
    except Exception as exc:  # one line, never a traceback: what the checks did not name
        print(redact(f"Restore failed: {type(exc).__name__}: {str(exc)[:300]}."), file=sys.stderr)
        return 1
    return 0


def run_export_user(settings: Settings, user_id: int, out: str | None) -> int:
    """`python -m bot export-user ID`."""
    from core_tools.backup.userdata import export_user
    from db.engine import make_engine

    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    target = Path(out or f"data/export-{user_id}-{stamp}.zip")
    if target.exists():
        print(f"export-user failed: {target} exists already; choose a new file name.", file=sys.stderr)
        return 1
    engine = make_engine(settings.database_url)
    try:
        export = export_user(engine, Path(settings.media_dir), user_id, target)
    except BackupError as exc:
        print(f"export-user failed: {exc}.", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    rows = sum(export.tables.values())
    say(f"Exported {rows} row(s) in {len(export.tables)} table(s) and {export.files} file(s) to {target}.")
    return 0


def run_forget_user(settings: Settings, user_id: int, yes: bool) -> int:
    """`python -m bot forget-user ID`."""
    from core_tools.backup.userdata import forget_user, summary
    from db.engine import make_engine

    if not yes:
        answer = input(f"Delete everything stored about user {user_id}? This cannot be undone. [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            say("Nothing was deleted.")
            return 1
    engine = make_engine(settings.database_url)
    try:
        erased = forget_user(engine, Path(settings.media_dir), user_id)
    finally:
        engine.dispose()
    lines = list(summary(erased))
    say(
        f"Deleted everything stored about user {user_id}:"
        if lines
        else f"Nothing was stored about user {user_id}."
    )
    for line in lines:
        say(f"- {line}")
    return 0


def dispatch(settings: Settings, args: argparse.Namespace) -> int:
    """Run one of COMMANDS."""
    if args.command == "restore":
        return run_restore(settings, args)
    if args.command == "export-user":
        return run_export_user(settings, args.user_id, args.out)
    return run_forget_user(settings, args.user_id, args.yes)
