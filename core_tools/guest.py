"""The guest profile: a turn whose answer is posted into a chat the user does not own (Telegram's guest mode,
an inline query), so it is made without anything private: no memories, no files, no earlier conversation,
no tool that reads the user's data (core_tools/agent/loop.py applies it; bot/runtime/guest.py runs it).

Each guest turn is a conversation of its own: a fresh conversation key above every Telegram chat id (ids
have at most 52 significant bits; forum topics' keys are negative, db/topics.py), so its session has no
history, its stored results and code files are its own, and it is ended as soon as the turn is."""

from __future__ import annotations

import secrets

GUEST_KEY_BASE = 1 << 53
GUEST_CHAT_TYPE = "guest"  # the chat type its session is stored with
# What a guest turn's LLM requests are accounted as: a guest query's, an inline query's.
GUEST = "guest"
INLINE = "inline"
PURPOSES = (GUEST, INLINE)
# Tools that read nothing of the user's: the web, the sandbox (its in/ holds only this turn's files), and
# this turn's own stored results. An allow-list: a tool added later (an MCP server's, a helper agent) stays
# out until it is named here.
GUEST_TOOLS = frozenset({"search", "fetch", "code", "read_result"})

GUEST_NOTE = (
    "This answer is posted into a chat the user does not own, where other people may read it. You have "
    "none of the user's memories, files or earlier conversation here, and no tool that reads them: do not "
    "guess private facts about the user; if the question needs them, say it is better asked in private. "
    "Keep the answer short enough for one message. Files written by code cannot be sent here."
)


def guest_key() -> int:
    """A new conversation key for one guest turn (random: unique across processes)."""
    return GUEST_KEY_BASE + secrets.randbits(48)


def is_guest_key(key: int) -> bool:
    """Whether a conversation key stands for a guest turn (not a Telegram chat or a forum topic)."""
    return key >= GUEST_KEY_BASE


def refusal(tool: str) -> str:
    """What the model is told when it calls a tool a guest turn does not have."""
    return (
        f"the {tool} tool is not available here: this answer is posted into someone else's chat, where the "
        "user's private data (memories, files, reminders) must not go; answer without it, or suggest "
        "continuing in the private chat"
    )
