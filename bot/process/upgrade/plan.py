"""Where the database stands against this code's migrations."""

from __future__ import annotations

from dataclasses import dataclass

from bot.config.settings import Settings
from bot.process.upgrade.errors import UpgradeFailed
from db.engine import make_engine
from db.migrate import alembic_config, at_head, upgrade
from db.snapshot import revision_of


@dataclass(frozen=True)
class Plan:
    """The database's revision (None: an empty database), this code's head, and the revisions it knows."""

    current: str | None
    head: str | None
    known: frozenset[str]

    @property
    def fresh(self) -> bool:
        """An empty database: nothing to protect, it is simply migrated."""
        return self.current is None

    @property
    def at_head(self) -> bool:
        """Nothing to do."""
        return self.current == self.head

    @property
    def ahead(self) -> bool:
        """A revision this code does not know: a newer version of the bot made it."""
        return self.current is not None and self.current not in self.known

    @property
    def behind(self) -> bool:
        """An upgrade to do."""
        return not self.fresh and not self.at_head and not self.ahead


def plan_of(url: str) -> Plan:
    """Read the database's revision and this code's migrations."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config(url))
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            current = revision_of(conn)
    finally:
        engine.dispose()
    known = frozenset(rev.revision for rev in scripts.walk_revisions())
    return Plan(current, scripts.get_current_head(), known)


def settle(settings: Settings) -> Plan | None:
    """Bring DATABASE_URL to head where nothing needs protecting: at head (nothing to do, read without
    Alembic: db.migrate.at_head), empty, or UPGRADE_CHECK=off (migrated at once). None once done; otherwise
    the plan of a database that only the checked upgrade may take (behind this code, or ahead of it)."""
    url = settings.database_url
    engine = make_engine(url)
    try:
        if at_head(engine):
            return None
    finally:
        engine.dispose()
    if settings.upgrade_check == "off":
        upgrade(url)
        return None
    plan = plan_of(url)
    if plan.fresh:  # nothing to protect (db.migrate serialises its migration)
        upgrade(url)
        return None
    return plan


def require_schema(settings: Settings) -> None:
    """What building the services does to DATABASE_URL (bot/process/wiring.py): `settle`, and UpgradeFailed
    for a database it leaves to the checked upgrade. The entry points take such a database through the
    checked upgrade before they build anything (bot/process/upgrade/start.py, `ensure_schema`), so a caller
    that did not never migrates a live database unchecked."""
    plan = settle(settings)
    if plan is not None:
        raise UpgradeFailed(
            "building the services",
            f"the database is at schema revision {plan.current}, not this code's {plan.head}: "
            "`python -m bot upgrade` upgrades it (checked on a copy first)",
            revision=plan.current,
        )
