"""The start path: a database at head costs nothing more than reading its revision (db.migrate.at_head,
without Alembic); an empty one is migrated; one behind goes through the checked upgrade unless
UPGRADE_CHECK=off (then it is migrated at once, as before)."""

from __future__ import annotations

import logging

from bot.config.settings import Settings
from bot.process.upgrade.errors import UpgradeFailed
from db.engine import make_engine
from db.migrate import at_head, upgrade

log = logging.getLogger(__name__)


def ensure_schema(settings: Settings) -> None:
    """Bring DATABASE_URL to this code's head; UpgradeFailed (the owner told) when the upgrade failed."""
    url = settings.database_url
    engine = make_engine(url)
    try:
        if at_head(engine):
            return
    finally:
        engine.dispose()
    if settings.upgrade_check == "off":
        upgrade(url)
        return
    from bot.process.upgrade.plan import plan_of

    if plan_of(url).fresh:  # an empty database: nothing to protect (db.migrate serialises its migration)
        upgrade(url)
        return
    from bot.process.upgrade.notify import tell_owner
    from bot.process.upgrade.run import checked_upgrade

    try:
        checked_upgrade(settings, say=log.info)
    except UpgradeFailed as exc:
        tell_owner(settings, f"The bot did not start: {exc.line()}")
        raise
