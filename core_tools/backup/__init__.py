"""Backups (taken, encrypted with age, cut into parts, restored, drilled) and each user's data to take or
erase. Knows nothing of Telegram: bot/runtime/backup_jobs.py and bot/adapter/commands/data.py bring it
there."""
