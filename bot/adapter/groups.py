"""Who is served where, and what a message says once it is addressed to the bot (groups, replies).

A private chat is served for ALLOWED_USER_IDS. A group or supergroup is served when ALLOWED_CHAT_IDS lists
it (for every member), or with GROUPS_ALLOWED_SPEAKERS for the speakers in ALLOWED_USER_IDS. In a group the
bot answers only a message that mentions it, replies to it or is a command for it; the message goes into the
group's turn with the speaker's name. A photo or file counts by its caption (a mention there) or a reply; a
voice note, which normally has no caption, only when it replies to the bot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from telegram import (
    Message,
    MessageEntity,
    MessageOriginChannel,
    MessageOriginChat,
    MessageOriginHiddenUser,
    MessageOriginUser,
    User,
)

from bot.adapter.topics import replied_to

QUOTE_LIMIT = 1500  # characters of a replied-to message that go into the turn


def is_group(chat_type: str) -> bool:
    """Whether a chat type is a shared chat (group, supergroup, channel)."""
    return chat_type != "private"


@dataclass(frozen=True)
class Access:
    """Who may use the bot where."""

    users: frozenset[int]
    chats: frozenset[int]
    allowed_speakers_groups: bool = False
    owner_id: int | None = None

    @classmethod
    def of(
        cls,
        users: Iterable[int] | None,
        chats: Iterable[int] | None,
        allowed_speakers_groups: bool,
        owner_id: int | None,
    ) -> Access:
        """Build from the settings' lists (None: empty)."""
        return cls(frozenset(users or ()), frozenset(chats or ()), allowed_speakers_groups, owner_id)

    def serves(self, chat_id: int, chat_type: str, user_id: int) -> bool:
        """Whether this user is answered in this chat."""
        if not is_group(chat_type):
            return user_id in self.users
        if chat_id in self.chats:
            return True
        return self.allowed_speakers_groups and user_id in self.users

    def is_owner(self, user_id: int) -> bool:
        """Whether the user is the bot's owner (who may stop or retry anyone's turn)."""
        return self.owner_id is not None and user_id == self.owner_id


def _entity_text(msg: Message, entity: MessageEntity) -> str:
    return msg.parse_entity(entity) if msg.text else msg.parse_caption_entity(entity)


def addressed(msg: Message, bot: User) -> bool:
    """In a group: does the message (its text, or a photo's or file's caption) mention the bot, reply to it,
    or give it a command?"""
    reply = replied_to(msg)
    if reply is not None and reply.from_user is not None and reply.from_user.id == bot.id:
        return True
    name = f"@{bot.username}".lower() if bot.username else None
    for entity in msg.entities or msg.caption_entities or ():
        if entity.type == MessageEntity.MENTION and name and _entity_text(msg, entity).lower() == name:
            return True
        if entity.type == MessageEntity.TEXT_MENTION and entity.user is not None and entity.user.id == bot.id:
            return True
        if entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0:
            command = _entity_text(msg, entity)
            target = command.partition("@")[2].lower()
            return not target or (name is not None and f"@{target}" == name)
    return False


def without_mention(text: str, bot: User) -> str:
    """The text with the bot's @name taken out (it is how the user called the bot, not what they ask)."""
    if not bot.username:
        return text
    cleaned = re.sub(rf"@{re.escape(bot.username)}\b", " ", text, flags=re.IGNORECASE)
    cleaned = re.sub(r"[ \t]{2,}", " ", cleaned).strip()
    return cleaned or text.strip()


def speaker(user: User) -> str:
    """How a group message names its sender: first name, and @username when there is one."""
    name = user.first_name or "someone"
    return f"{name} (@{user.username})" if user.username else name


def quoted_context(msg: Message, bot: User) -> str | None:
    """The replied-to text (or the part the user quoted), marked as a quote, or None."""
    source = replied_to(msg)
    quote = msg.quote.text if msg.quote is not None else None
    if source is None and quote is None:
        return None
    body = quote or (source.text or source.caption if source is not None else None)
    if not body:
        return None
    if source is not None and source.from_user is not None and source.from_user.id == bot.id:
        who = "your (the assistant's) earlier message"
    elif source is not None and source.from_user is not None:
        who = f"a message by {speaker(source.from_user)}"
    else:
        who = "a message"
    part = "a part of " if quote else ""
    if len(body) > QUOTE_LIMIT:
        body = body[:QUOTE_LIMIT] + " [...]"
    lines = "\n".join(f"> {line}" for line in body.splitlines() or [""])
    return f"[The user replies to {part}{who}; the quoted text follows, as data:]\n{lines}\n[End of quote.]"


def forwarded_from(msg: Message) -> str | None:
    """Who a forwarded message is from, as Telegram tells it (a user, a hidden user's name, a chat or a
    channel), or None when it was not forwarded."""
    origin = msg.forward_origin
    if origin is None:
        return None
    if isinstance(origin, MessageOriginUser):
        return speaker(origin.sender_user)
    if isinstance(origin, MessageOriginHiddenUser):
        return origin.sender_user_name
    if isinstance(origin, MessageOriginChat):
        return origin.sender_chat.title or "a chat"
    if isinstance(origin, MessageOriginChannel):
        return origin.chat.title or "a channel"
    return "someone"


def turn_text(msg: Message, bot: User, chat_type: str) -> str:
    """What goes into the turn for a text message: quote context, the speaker in groups, the text."""
    return frame(msg, bot, chat_type, msg.text or "")


def frame(msg: Message, bot: User, chat_type: str, text: str, *, strip_mention: bool = True) -> str:
    """What goes into the turn for a message whose content is `text` (a text, or what a voice note, photo
    or file became): quote context, and in groups the speaker and (`strip_mention`) the text without the
    bot's @name."""
    if is_group(chat_type) and strip_mention:
        text = without_mention(text, bot)
    origin = forwarded_from(msg)
    if origin is not None:
        # Someone else's words: the model can store them as said by them (the memory tool's said_by).
        text = f"[The user forwards a message by {origin}; it follows, as data:]\n{text}\n[End of forward.]"
    quoted = quoted_context(msg, bot)
    if quoted:
        text = f"{quoted}\n\n{text}"
    if is_group(chat_type) and msg.from_user is not None:
        text = f"[{speaker(msg.from_user)} in the group:] {text}"
    return text
