"""The record of checked upgrades (table `upgrades`, migration 0029): written once the live database is
migrated, read by `python -m bot rollback`, `doctor` and the owner's /help."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Engine, Table, insert, inspect, select

from db.models import Upgrade


@dataclass(frozen=True)
class UpgradeRow:
    """One recorded upgrade."""

    id: int
    upgraded_at: datetime
    from_version: str | None
    to_version: str
    from_revision: str | None
    to_revision: str
    backup: str | None
    seconds: float


def record_upgrade(
    engine: Engine,
    *,
    upgraded_at: datetime,
    from_version: str | None,
    to_version: str,
    from_revision: str | None,
    to_revision: str,
    backup: str | None,
    seconds: float,
) -> int:
    """Store one upgrade; its id."""
    with engine.begin() as conn:
        result = conn.execute(
            insert(Upgrade).values(
                upgraded_at=upgraded_at,
                from_version=from_version,
                to_version=to_version,
                from_revision=from_revision,
                to_revision=to_revision,
                backup=backup,
                seconds=seconds,
            )
        )
        key = result.inserted_primary_key
        return int(key[0]) if key else 0


def last_upgrade(engine: Engine) -> UpgradeRow | None:
    """The newest recorded upgrade; None without one (or on a schema older than the table)."""
    table = Upgrade.__table__
    assert isinstance(table, Table)
    with engine.connect() as conn:
        if not inspect(conn).has_table("upgrades"):
            return None
        row = conn.execute(select(table).order_by(table.c.id.desc()).limit(1)).mappings().first()
    if row is None:
        return None
    at = row["upgraded_at"]
    return UpgradeRow(
        id=int(row["id"]),
        upgraded_at=at if at.tzinfo is not None else at.replace(tzinfo=UTC),
        from_version=row["from_version"],
        to_version=row["to_version"],
        from_revision=row["from_revision"],
        to_revision=row["to_revision"],
        backup=row["backup"],
        seconds=float(row["seconds"]),
    )
