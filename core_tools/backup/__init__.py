"""Backups (taken, encrypted with age, cut into parts, restored, drilled) and each user's data to take or
erase. Knows nothing of Telegram: bot/backup_jobs.py and bot/data_commands.py bring it there."""
