"""Memories shared by the self-check's tests (core and bot)."""

from __future__ import annotations

# Six memories whose first six content words are the same: their one cue has five places in the top 5, so
# one of them cannot be found by it, whatever recall does.
SAME_START = "Dentist appointment booked for Tuesday morning at nine"
SAME_CUE = [
    f"{SAME_START}, {tail}"
    for tail in (
        "bring the card",
        "ask about whitening",
        "park at the back",
        "then the pharmacy",
        "remember the X-rays",
        "take the bus",
    )
]
