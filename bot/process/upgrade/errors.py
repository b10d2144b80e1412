"""What a failed upgrade or rollback says: one line for the operator (and the owner)."""

from __future__ import annotations


class UpgradeFailed(Exception):
    """The upgrade stopped at `stage` for `reason`; `untouched`: the live database is as it was."""

    def __init__(self, stage: str, reason: str, *, untouched: bool = True, revision: str | None = None):
        self.stage = stage
        self.reason = reason
        self.untouched = untouched
        self.revision = revision
        super().__init__(self.line())

    def line(self) -> str:
        """The one line: what failed and in what state the database is."""
        reason = self.reason.rstrip(". ")
        if self.untouched:
            state = "the live database is unchanged" + (
                f" (schema revision {self.revision})" if self.revision else ""
            )
        else:
            state = "the live database may be partly migrated: restore it with `python -m bot rollback`"
        return f"Upgrade failed while {self.stage}: {reason}; {state}."
