"""The checked upgrade: backup, copy, migrate the copy, self-test it, then migrate the live database and
record it. Any failure before the last step leaves the live database untouched (it is only read)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bot.config.settings import Settings
from bot.process.checks import Check
from bot.process.upgrade.copy import trial_database
from bot.process.upgrade.errors import UpgradeFailed
from bot.process.upgrade.lock import upgrade_lock
from bot.process.upgrade.plan import plan_of
from bot.process.upgrade.selftest import Before, read_before
from bot.process.upgrade.sync import run_sync
from bot.runtime.version import code_version, previous_commit
from core_tools.text import clip
from db.engine import make_engine
from db.migrate import upgrade
from db.models import utcnow
from db.upgrades import last_upgrade, record_upgrade

Say = Callable[[str], None]


@dataclass
class Outcome:
    """What an upgrade did (nothing when the database was at head already)."""

    from_revision: str | None
    to_revision: str | None
    backup: str | None = None
    seconds: float = 0.0
    done: bool = False
    lines: list[str] = field(default_factory=list)


def _reason(exc: BaseException) -> str:
    return clip(f"{type(exc).__name__}: {exc}".replace("\n", " "), 300)


def take_upgrade_backup(settings: Settings, say: Say) -> str:
    """The full backup of `python -m bot backup` (encrypted for BACKUP_AGE_RECIPIENTS); its name."""
    from core_tools.backup.crypto import recipient_strings
    from core_tools.backup.take import BackupConfig, take_backup

    config = BackupConfig(
        settings.database_url,
        settings.media_dir,
        settings.backup_dir,
        settings.backup_keep,
        recipient_strings(settings.backup_age_recipients),
        settings.backup_part_bytes,
    )
    path, manifest = take_backup(config)
    state = "encrypted" if manifest.encrypted else "not encrypted"
    say(f"backup {manifest.name} written to {path.parent} ({manifest.size} bytes, {state})")
    return manifest.name


def _from_version(settings: Settings) -> str | None:
    engine = make_engine(settings.database_url)
    try:
        last = last_upgrade(engine)
    finally:
        engine.dispose()
    if last is not None:
        return last.to_version
    before = previous_commit()
    return f"commit {before[:7]}" if before else None


def checked_upgrade(settings: Settings, say: Say, clock: Callable[[], float] = time.monotonic) -> Outcome:
    """Upgrade DATABASE_URL to this code's head, proven on a copy first; UpgradeFailed on a failure."""
    started = clock()
    url = settings.database_url
    with upgrade_lock(url):
        try:
            plan = plan_of(url)
        except Exception as exc:
            raise UpgradeFailed("reading the database's revision", _reason(exc)) from exc
        if plan.ahead:
            raise UpgradeFailed(
                "planning",
                f"the database is at schema revision {plan.current}, which this code does not know (newest "
                f"{plan.head}): run the version of the bot that made it",
                revision=plan.current,
            )
        if plan.fresh or plan.at_head:
            if plan.fresh:
                upgrade(url)
            return Outcome(plan.current, plan.head)
        assert plan.head is not None
        say(f"upgrading the database from schema revision {plan.current} to {plan.head} ({code_version()})")
        stage = "taking the backup"
        try:
            backup = take_upgrade_backup(settings, say)
            stage = "copying the database"
            with trial_database(url, plan.current, say) as trial_url:
                before = read_before(trial_url)
                stage = "migrating the copy"
                upgrade(trial_url)
                say(f"migrated the copy to {plan.head}")
                stage = "self-testing the copy"
                checks = run_sync(lambda: _self_test(settings, trial_url, before, say))
        except UpgradeFailed:
            raise
        except Exception as exc:
            raise UpgradeFailed(stage, _reason(exc), revision=plan.current) from exc
        failed = [c for c in checks if not c.ok]
        if failed:
            reason = "; ".join(f"{c.name}: {c.detail}" for c in failed)
            raise UpgradeFailed(stage, clip(reason, 400), revision=plan.current)
        from_version = _from_version(settings)
        try:
            upgrade(url)
        except Exception as exc:
            raise UpgradeFailed(
                f"migrating the live database (backup {backup})", _reason(exc), untouched=False
            ) from exc
        seconds = clock() - started
        engine = make_engine(url)
        try:
            record_upgrade(
                engine,
                upgraded_at=utcnow(),
                from_version=from_version,
                to_version=code_version(),
                from_revision=plan.current,
                to_revision=plan.head,
                backup=backup,
                seconds=seconds,
            )
        finally:
            engine.dispose()
        say(
            f"upgraded the database from {plan.current} to {plan.head} in {seconds:.1f} s; "
            f"`python -m bot rollback` restores backup {backup}"
        )
        return Outcome(plan.current, plan.head, backup, seconds, done=True)


async def _self_test(settings: Settings, trial_url: str, before: Before, say: Say) -> list[Check]:
    from bot.process.upgrade.selftest import self_test

    # MEDIA_DIR stays the live one: the self-test reads no file and stores none.
    return await self_test(settings.model_copy(update={"database_url": trial_url}), before, say)
