"""Where the database stands against this code's migrations."""

from __future__ import annotations

from dataclasses import dataclass

from db.engine import make_engine
from db.migrate import alembic_config
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
