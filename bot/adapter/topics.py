"""Forum topics: which conversation an update belongs to, and the Bot API arguments that answer there.

In a forum supergroup each topic is a conversation of its own (session, queue, lease, /stop, /retry,
/newsession, schedules, files), kept under a conversation key (db/topics.py). Only a message Telegram marks
`is_topic_message` in a supergroup is in a topic: a forum's General topic, normal groups (whose replies also
carry a `message_thread_id`, of a thread of replies) and private chats are the chat itself, as before.
A message to a topic is sent with its `message_thread_id`; General takes none (Telegram refuses thread 1).
"""

from __future__ import annotations

from telegram import MaybeInaccessibleMessage, Message, Update
from telegram.constants import ChatType

from db.topics import Place, Topics


def thread_of(msg: MaybeInaccessibleMessage | None) -> int | None:
    """The forum topic a message is in, or None when it is in no topic (General included)."""
    if not isinstance(msg, Message) or not msg.is_topic_message or msg.chat.type != ChatType.SUPERGROUP:
        return None
    return msg.message_thread_id


def replied_to(msg: Message) -> Message | None:
    """The message this one really replies to: in a forum topic Telegram makes every message a reply to the
    topic's creation message, which is no reply of the user's (nor, if the bot made the topic, to the bot)."""
    reply = msg.reply_to_message
    if reply is None or reply.forum_topic_created is not None:
        return None
    return reply


def conversation_of(topics: Topics, update: Update) -> int:
    """The conversation key of an update's chat and topic (a button press: of the message it is under)."""
    chat = update.effective_chat
    assert chat is not None
    return topics.key(chat.id, thread_of(update.effective_message))


def place_of(update: Update) -> Place:
    """Where to answer an update: its chat, and its topic if it is in one."""
    chat = update.effective_chat
    assert chat is not None
    return Place(chat.id, thread_of(update.effective_message))
