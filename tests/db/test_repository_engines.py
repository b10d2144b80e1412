"""A repository runs its Core statements on the engine it is given (db/engine.py, engine_for), not on
one read back out of its sessionmaker; the composition root passes it (bot/process/wiring.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import sessionmaker

from core_tools.memory.store import MemoryStore
from db.approvals import Approvals
from db.conversations import Conversations
from db.engine import make_sessionmaker
from db.media import MediaFiles
from db.models import User
from db.usage import UsageLog, UsageQueries

REPOSITORIES: list[Callable[..., Any]] = [Conversations, UsageLog, UsageQueries, MediaFiles, Approvals]


def test_core_statements_run_on_the_engine_given_not_on_the_sessionmakers(engine: Engine) -> None:
    conv = Conversations(sessionmaker(), engine)  # a sessionmaker bound to nothing: only the engine is used
    conv.ensure_user(5, "Ada", "ada")
    with engine.connect() as conn:
        assert conn.execute(select(User.first_name).where(User.id == 5)).scalar() == "Ada"
    assert conv.user_timezone(5) is None


@pytest.mark.parametrize("repository", REPOSITORIES, ids=lambda r: r.__name__)
def test_a_sessionmaker_bound_to_another_engine_is_refused(
    repository: Callable[..., Any], engine: Engine, other_engine: Engine
) -> None:
    repository(make_sessionmaker(engine), engine)  # the same engine twice: fine
    with pytest.raises(ValueError, match="another engine"):
        repository(make_sessionmaker(other_engine), engine)


async def test_the_memory_store_reads_the_prompts_memories_on_the_engine_given(
    engine: Engine, other_engine: Engine
) -> None:
    store = MemoryStore(sessionmaker(), engine)  # bound to nothing: the prompt's read is Core
    assert (await store.prompt_section(5, "s1", "hello")).text == ""
    with pytest.raises(ValueError, match="another engine"):
        MemoryStore(make_sessionmaker(other_engine), engine)
