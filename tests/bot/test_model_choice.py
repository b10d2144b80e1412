"""A chat's model choice as every process sharing the database sees it (two processes on one database, each
with its own Conversations): a /model answered by one is the model the other's next turn uses."""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from bot.texts.models import ModelChoice
from core_tools.usage.prices import PriceTable
from db.conversations import Conversations

MODELS = ["small-model", "big-model"]


def test_a_model_chosen_through_another_process_is_the_one_used(
    db_sessions: sessionmaker[Session], engine: Engine
) -> None:
    here = ModelChoice(MODELS, Conversations(db_sessions, engine), PriceTable())
    there = ModelChoice(MODELS, Conversations(db_sessions, engine), PriceTable())
    chat = -100555
    assert here.for_chat(chat) is None  # the default, seen here once (a turn)
    there.set(chat, "big-model", by_user=1)  # /model in a process the load balancer picked
    assert here.for_chat(chat) == "big-model"
    there.set(chat, "small-model", by_user=1)  # back to the default
    assert here.for_chat(chat) is None


def test_with_one_model_there_is_nothing_to_read(db_sessions: sessionmaker[Session], engine: Engine) -> None:
    only = ModelChoice(MODELS[:1], Conversations(db_sessions, engine), PriceTable())
    assert only.for_chat(-100555) is None
