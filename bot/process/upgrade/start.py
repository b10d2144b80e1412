"""The start path: a database at head costs nothing more than reading its revision (db.migrate.at_head,
without Alembic); an empty one is migrated; one behind goes through the checked upgrade unless
UPGRADE_CHECK=off (then it is migrated at once, as before)."""

from __future__ import annotations

import logging

from bot.config.settings import Settings
from bot.process.upgrade.errors import UpgradeFailed
from bot.process.upgrade.plan import settle

log = logging.getLogger(__name__)


def ensure_schema(settings: Settings) -> None:
    """Bring DATABASE_URL to this code's head; UpgradeFailed (the owner told) when the upgrade failed."""
    if settle(settings) is None:  # at head, empty, or UPGRADE_CHECK=off
        return
    from bot.process.upgrade.notify import tell_owner
    from bot.process.upgrade.run import checked_upgrade

    try:
        checked_upgrade(settings, say=log.info)
    except UpgradeFailed as exc:
        tell_owner(settings, f"The bot did not start: {exc.line()}")
        raise
