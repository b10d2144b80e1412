"""Scheduled backups in the bot: taken at BACKUP_SCHEDULE (the owner's time zone) by one process (a job
lease), in a worker process at low priority (core_tools/backup/worker.py); sent to the owner's private chat
part by part through the front end's outbox (BACKUP_TO_TELEGRAM); drilled weekly (BACKUP_DRILL). The owner
hears of a failure, and once that backups are not encrypted; nothing when all is well."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from cronsim import CronSim

from bot.config.settings import Settings
from bot.runtime.jobs import Job
from bot.runtime.outbox import Blocked, DeliveryFailed, Outbox, Refused, RetryLater
from bot.runtime.services import Services
from core_tools.backup.crypto import new_identity, recipient_strings
from core_tools.backup.manifest import BackupError, read_manifest
from core_tools.backup.store import STATE_NAME, clean_leftovers, list_backups, scratch_parent
from core_tools.backup.take import BackupConfig
from core_tools.backup.worker import run_worker

log = logging.getLogger(__name__)


CHECK_S = 30.0  # how often the schedule is looked at
DRILL_EVERY = timedelta(days=7)
SEND_TRIES = 4
SEND_BACKOFF_S = 2.0  # then 4, 8 s
PLAIN_NOTICE = (
    "Backups are being taken, but not encrypted: BACKUP_AGE_RECIPIENTS is empty. Anyone who gets a backup "
    "file can read everything in it. Set it to your age public key (age-keygen) to encrypt them. "
    "(You are told this once.)"
)


class BackupJobs:
    """The scheduled backup, its upload and its drill; the owner is told and sent files through `outbox`."""

    def __init__(self, services: Services, outbox: Outbox) -> None:
        self.services = services
        self.outbox = outbox
        self.settings: Settings = services.settings
        self.folder = Path(self.settings.backup_dir)
        self.started = datetime.now(UTC)
        self.lock = asyncio.Lock()
        self.backoff_s = SEND_BACKOFF_S  # the first wait between tries of an upload, doubled each time
        self.cleaned = False  # what killed runs left is deleted at the first tick

    # ------------------------------------------------------------------ state

    def _state(self) -> dict[str, Any]:
        try:
            body = json.loads((self.folder / STATE_NAME).read_text())
        except (OSError, ValueError):
            return {}
        return body if isinstance(body, dict) else {}

    def _save_state(self, **changes: Any) -> None:
        state = {**self._state(), **changes}
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f"{STATE_NAME}.tmp"
        tmp.write_text(json.dumps(state))
        tmp.replace(self.folder / STATE_NAME)

    def _zone(self) -> ZoneInfo:
        owner = self.settings.owner_id
        name = self.services.conversations.user_timezone(owner) if owner is not None else None
        try:
            return ZoneInfo(name or self.settings.default_timezone)
        except Exception:
            return ZoneInfo(self.settings.default_timezone)

    def due(self, now: datetime | None = None) -> bool:
        """Whether a scheduled backup fell due since the newest one (or since this process started)."""
        if not self.settings.backup_schedule:
            return False
        backups = list_backups(self.folder)
        since = self.started
        if backups:
            since = datetime.fromisoformat(backups[-1][1].contents.created_at)
        zone = self._zone()
        fire = next(CronSim(self.settings.backup_schedule, since.astimezone(zone)))
        return fire <= (now or datetime.now(UTC))

    def _drill_due(self) -> bool:
        if not self.settings.drill_on:
            return False
        last = self._state().get("last_drill")
        if not isinstance(last, str):
            return True
        return datetime.now(UTC) - datetime.fromisoformat(last) >= DRILL_EVERY

    # ------------------------------------------------------------------ the job

    async def clean(self) -> list[str]:
        """Delete what backups and drills killed midway (this process stopped) left: in BACKUP_DIR and in
        their private scratch folders beside the database."""
        settings = self.settings
        private = scratch_parent(settings.database_url, settings.media_dir, settings.backup_dir)
        gone = await asyncio.to_thread(clean_leftovers, self.folder, private)
        if gone:
            log.info("deleted what unfinished backups or drills left: %s", ", ".join(gone))
        return gone

    async def tick(self) -> None:
        """The periodic check: take a backup when one is due (never two at once); the first one after the
        start deletes what killed runs left."""
        if not self.cleaned and not self.lock.locked():
            self.cleaned = True
            await self.clean()
        if self.lock.locked() or not await asyncio.to_thread(self.due):
            return
        await self.run()

    async def run(self) -> Path | None:
        """Take a backup now, send it and drill it as the settings say; its manifest, or None (the owner
        was told why)."""
        async with self.lock:
            recipients = recipient_strings(self.settings.backup_age_recipients)
            drill = await asyncio.to_thread(self._drill_due)
            drill_keys: list[str] = []
            if drill and recipients:
                # The bot never holds the owners' private key: a drill of an encrypted backup decrypts with a
                # one-time key of its own, added as one more recipient and forgotten after the drill.
                secret, public = new_identity()
                recipients, drill_keys = [*recipients, public], [secret]
            config = BackupConfig(
                database_url=self.settings.database_url,
                media_dir=self.settings.media_dir,
                backup_dir=self.settings.backup_dir,
                keep=self.settings.backup_keep,
                recipients=recipients,
                part_bytes=self.settings.backup_part_bytes,
            )
            try:
                result = await run_worker("take", {"config": config.to_dict()})
            except BackupError as exc:
                log.error("backup failed: %s", exc)
                await self.tell_owner(f"The backup failed: {exc}")
                return None
            manifest = Path(result["manifest"])
            log.info(
                "backup %s written: %d part(s), %d bytes", result["name"], result["parts"], result["size"]
            )
            told = self._state().get("told_plain")
            if not recipients and not told and await self.tell_owner(PLAIN_NOTICE):
                self._save_state(told_plain=True)
            if self.settings.backup_to_telegram:
                await self.send(manifest)
            if drill:
                await self.drill(manifest, drill_keys)
            return manifest

    async def tell_owner(self, text: str) -> bool:
        """A plain message to the owner's private chat; False when it could not be sent."""
        owner = self.settings.owner_id
        if owner is None:
            log.warning("no owner to tell: %s", text)
            return False
        try:
            await self.outbox.send(owner, text)
        except DeliveryFailed as exc:
            log.warning("could not tell the owner (%s): %s", exc, text)
            return False
        return True

    # ------------------------------------------------------------------ off the machine

    async def _upload(self, chat_id: int, path: Path, caption: str) -> None:
        delay = self.backoff_s
        for attempt in range(1, SEND_TRIES + 1):
            try:
                await self.outbox.send_file(chat_id, path, caption)
                return
            except RetryLater as exc:
                delay = exc.seconds
            except (Refused, Blocked):
                raise  # a request the chat will never take (too big, blocked): no use trying again
            except DeliveryFailed as exc:
                log.warning("sending %s failed (try %d of %d): %s", path.name, attempt, SEND_TRIES, exc)
            if attempt < SEND_TRIES:
                await asyncio.sleep(delay)
                delay *= 2
        raise DeliveryFailed(f"it failed {SEND_TRIES} times")

    async def send(self, manifest_path: Path) -> bool:
        """Send the backup's parts, then its manifest, to the owner's private chat; the owner is told when
        a part could not be sent after retries. True when everything arrived."""
        owner = self.settings.owner_id
        if owner is None:
            log.warning("BACKUP_TO_TELEGRAM is on but there is no owner to send backups to")
            return False
        manifest = read_manifest(manifest_path)
        folder = manifest_path.parent
        total = len(manifest.parts)
        files = [
            (folder / p.name, f"{manifest.name}: part {i} of {total}")
            for i, p in enumerate(manifest.parts, 1)
        ]
        files.append((manifest_path, f"{manifest.name}: manifest (restore: python -m bot restore FOLDER)"))
        for path, caption in files:
            try:
                await self._upload(owner, path, caption)
            except DeliveryFailed as exc:
                log.error("backup %s: %s could not be sent: %s", manifest.name, path.name, exc)
                await self.tell_owner(
                    f"Backup {manifest.name} could not be sent to this chat: {path.name} failed ({exc}). "
                    f"It is kept on the server in {folder}.",
                )
                return False
        return True

    # ------------------------------------------------------------------ the drill

    async def drill(self, manifest_path: Path, identities: list[str] | None = None) -> bool:
        """Restore the backup into a temporary folder and compare; tell the owner only when it fails."""
        settings = self.settings
        # The drill's plaintext copy goes into a private folder beside the database, never into BACKUP_DIR.
        work = scratch_parent(settings.database_url, settings.media_dir, settings.backup_dir)
        payload = {
            "manifest": str(manifest_path),
            "work": str(work),
            "backup_dir": str(self.folder),
            "identities": identities or [],
        }
        try:
            result = await run_worker("drill", payload)
        except BackupError as exc:
            result = {"ok": False, "problem": str(exc), "name": manifest_path.name}
        self._save_state(last_drill=datetime.now(UTC).isoformat())
        if result["ok"]:
            log.info("restore drill of %s: ok", manifest_path.parent.name)
            return True
        log.error("restore drill of %s failed: %s", manifest_path.parent.name, result["problem"])
        await self.tell_owner(
            f"The weekly restore drill failed: backup {manifest_path.parent.name} did not restore: "
            f"{result['problem']}. Take a new backup (python -m bot backup) and check BACKUP_DIR.",
        )
        return False

    async def drill_latest(self) -> bool | None:
        """Drill the newest backup (plain: an encrypted one needs a key only the run that took it had)."""
        backups = await asyncio.to_thread(list_backups, self.folder)
        if not backups:
            return None
        return await self.drill(backups[-1][0])

    def jobs(self) -> tuple[Job, ...]:
        """The periodic backup check when BACKUP_SCHEDULE is set, in one process at a time (job lease)."""
        if not self.settings.backups_on:
            return ()
        return (Job("backup", timedelta(seconds=CHECK_S), CHECK_S, "backup", self.tick),)
