"""A line of `python -m bot doctor`'s report."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report: ok, a warning (worth a look, not a failure) or a failure, with
    what to do about it."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    warning: bool = False
    # The probe did not answer in time (it may still be running in a thread the doctor does not wait for).
    timed_out: bool = False

    def line(self) -> str:
        """`ok   name: detail`, `WARN name: detail. Fix: ...` or `FAIL name: detail. Fix: ...`."""
        tag = "FAIL" if not self.ok else "WARN" if self.warning else "ok  "
        text = f"{tag} {self.name}: {self.detail}"
        if self.fix and (not self.ok or self.warning):
            text = f"{text.rstrip('. ')}. Fix: {self.fix}"
        return text
