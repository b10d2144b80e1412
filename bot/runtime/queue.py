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
from dataclasses import dataclass

from db.runtime import Arrival, Entry, Inbox, Queued, RuntimeStore


@dataclass
class Incoming:
    """A message (or a re-run of a stored one) for its chat's next turn."""

    user_id: int
    chat_id: int
    text: str
    first_name: str | None
    username: str | None
    chat_type: str
    tg_message_id: int | None = None
    rerun_of: int | None = None  # a stored user message to answer again (/retry, an edit)
    reply_to: int | None = None  # the Telegram message the answer refers to (an edit)
    inbox_id: int | None = None  # where it waits in the database (db/runtime/inbox.py) until its turn
    media_ids: tuple[int, ...] = ()  # media_files rows of a voice note, photo, album or file
    heard: str | None = None  # a voice note's transcript: the answer quotes it on top
    speak: bool = False  # a voice note: the answer also goes out as a voice note
    typing_at: float | None = None  # when "typing" was last shown for it (its transcription), monotonic
    update_id: int | None = None  # the Telegram update it came in (the chat's queue is in this order)
    # The bot whose update this is, when the update's duplicate check is left to the store of the message
    # (a plain text message: one transaction for both, bot/adapter/app.py).
    dedup_bot: int | None = None

    def media(self) -> dict[str, object] | None:
        """What the inbox keeps of the media (None for plain text)."""
        if not self.media_ids and self.heard is None:
            return None
        return {"ids": list(self.media_ids), "heard": self.heard, "speak": self.speak}

    def entry(self) -> Entry:
        """The inbox row of the message."""
        return Entry(
            self.user_id,
            self.chat_id,
            self.chat_type,
            self.text,
            first_name=self.first_name,
            username=self.username,
            tg_message_id=self.tg_message_id,
            media=self.media(),
            update_id=self.update_id,
            rerun_of=self.rerun_of,
            reply_to=self.reply_to,
        )

    @classmethod
    def waiting(cls, q: Queued) -> Incoming:
        """A message as it waits in the inbox."""
        media = q.media or {}
        return cls(
            q.user_id,
            q.chat_id,
            q.content,
            q.first_name,
            q.username,
            q.chat_type,
            tg_message_id=q.tg_message_id,
            rerun_of=q.rerun_of,
            reply_to=q.reply_to,
            inbox_id=q.id,
            media_ids=tuple(media.get("ids") or ()),
            heard=media.get("heard"),
            speak=bool(media.get("speak")),
            update_id=q.update_id,
        )


class ChatQueue:
    """The chats' queues as this process uses them: store on arrival, read in order, take a batch."""

    def __init__(self, store: RuntimeStore, inbox: Inbox, *, merge_bursts: bool = True) -> None:
        self.store = store
        self.inbox = inbox
        self.merge_bursts = merge_bursts

    def put(self, item: Incoming, *, claim_for: str | None) -> Arrival:
        """Store an arriving message (see the module); `claim_for`: claim its chat for this process too."""
        return self.store.arrive(item.entry(), update_of=item.dedup_bot, claim_for=claim_for)

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
