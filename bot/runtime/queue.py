"""A chat's queue: the messages that arrived and wait for their turn (db/runtime/inbox.py), in Telegram's
update order, and which of them the next turn takes.

A message is stored the moment it arrives, in one transaction with its update's dedup (a plain text message
left its duplicate check to this store: `Incoming.dedup_bot`) and, when no holder of its chat is here, the
claim of the chat's lease: a duplicate delivery stores nothing and a first one is never lost.

Voice notes, photos and files (bot/adapter/media.py) come here once downloaded, transcribed or read, as an
`Incoming` carrying their media rows (and, for a voice note, the transcript the answer quotes), so they
queue, merge, stop and wait in the inbox exactly like text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from db.runtime import Arrival, Entry, Inbox, Queued, RuntimeStore
from db.speakers import Speaker, chat_type_of


def media_of(
    media_ids: Sequence[int], heard: str | None = None, speak: bool = False
) -> dict[str, Any] | None:
    """What the inbox keeps of a message's media (`Entry.media`; None for plain text): its media_files
    rows (a voice note, photo, album or file), a voice note's transcript (the answer quotes it on top) and
    whether the answer also goes out as a voice note."""
    if not media_ids and heard is None:
        return None
    return {"ids": list(media_ids), "heard": heard, "speak": speak}


@dataclass
class Incoming:
    """A message (or a re-run of a stored one) for its chat's next turn: the inbox entry it is stored as,
    and what only this process knows of it."""

    entry: Entry
    inbox_id: int | None = None  # where it waits in the database (db/runtime/inbox.py) until its turn
    typing_at: float | None = None  # when "typing" was last shown for it (its transcription), monotonic
    # The bot whose update this is, when the update's duplicate check is left to the store of the message
    # (a plain text message: one transaction for both, bot/adapter/app.py).
    dedup_bot: int | None = None

    @classmethod
    def waiting(cls, q: Queued) -> Incoming:
        """A message as it waits in the inbox."""
        return cls(q.entry, inbox_id=q.id)

    def changed(self, **entry_fields: Any) -> Incoming:
        """The same message with some of its entry's fields replaced (a /retry's or an edit's re-run)."""
        return replace(self, entry=replace(self.entry, **entry_fields))

    # The entry's fields as the runtime and the front ends read them.
    @property
    def speaker(self) -> Speaker:
        return self.entry.speaker

    @property
    def user_id(self) -> int:
        return self.entry.speaker.user_id

    @property
    def chat_id(self) -> int:
        return self.entry.speaker.chat_id

    @property
    def chat_type(self) -> str:
        who = self.entry.speaker
        return chat_type_of(who.user_id, who.chat_id, who.chat_type)

    @property
    def text(self) -> str:
        return self.entry.content

    @property
    def tg_message_id(self) -> int | None:
        return self.entry.tg_message_id

    @property
    def update_id(self) -> int | None:
        return self.entry.update_id

    @property
    def rerun_of(self) -> int | None:
        return self.entry.rerun_of  # a stored user message to answer again (/retry, an edit)

    @property
    def reply_to(self) -> int | None:
        return self.entry.reply_to  # the Telegram message the answer refers to (an edit)

    @property
    def media_ids(self) -> tuple[int, ...]:
        media = self.entry.media
        return tuple(media.get("ids") or ()) if media else ()

    @property
    def heard(self) -> str | None:
        media = self.entry.media
        return media.get("heard") if media else None

    @property
    def speak(self) -> bool:
        media = self.entry.media
        return bool(media.get("speak")) if media else False


class ChatQueue:
    """The chats' queues as this process uses them: store on arrival, read in order, take a batch."""

    def __init__(self, store: RuntimeStore, inbox: Inbox, *, merge_bursts: bool = True) -> None:
        self.store = store
        self.inbox = inbox
        self.merge_bursts = merge_bursts

    def put(self, item: Incoming, *, claim_for: str | None) -> Arrival:
        """Store an arriving message (see the module); `claim_for`: claim its chat for this process too."""
        return self.store.arrive(item.entry, update_of=item.dedup_bot, claim_for=claim_for)

    def waiting(self, chat_id: int) -> list[Queued]:
        """The chat's waiting messages in Telegram's order."""
        return self.inbox.waiting_in(chat_id)

    def latest(self, chat_id: int) -> int:
        """The newest inbox id of the chat (0: none waits)."""
        return self.inbox.latest_in(chat_id)

    def has_waiting(self, chat_id: int) -> bool:
        """Whether any message of the chat waits."""
        return self.inbox.has_waiting(chat_id)

    def discard(self, inbox_ids: Sequence[int]) -> None:
        """Forget waiting messages that will not be answered."""
        self.inbox.discard(inbox_ids)

    def batch(self, waiting: list[Incoming]) -> list[Incoming]:
        """The next turn's messages: the head, and with merging the same speaker's plain messages after it."""
        head = waiting[0]
        batch = [head]
        if self.merge_bursts and head.rerun_of is None:
            for item in waiting[1:]:
                if item.user_id != head.user_id or item.rerun_of is not None:
                    break
                batch.append(item)
        return batch
