"""Backups (taken, encrypted with age, cut into parts, restored, drilled) and each user's data to take or
erase. Knows nothing of Telegram: bot/backup_jobs.py and bot/data_commands.py bring it there."""

from core_tools.backup.manifest import BackupError, Manifest
from core_tools.backup.take import BackupConfig

__all__ = ["BackupConfig", "BackupError", "Manifest"]
