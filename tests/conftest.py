"""Shared fixtures: the loopback fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from core_tools.llm import LLMClient
from db.engine import make_engine, make_sessionmaker
from db.migrate import upgrade
from tests.fakes.openai_api import FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.harness import TOKEN


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    """A fake Bot API server."""
    async with FakeTelegram(token=TOKEN) as server:
        yield server


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    """A fake OpenAI-compatible server."""
    async with FakeLLM() as server:
        yield server


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    """An engine over a fresh SQLite file migrated to head by Alembic."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url)
    eng = make_engine(url)
    yield eng
    eng.dispose()


@pytest.fixture
def db_sessions(engine: Engine) -> sessionmaker[Session]:
    """A session factory over the migrated test database."""
    return make_sessionmaker(engine)


@pytest.fixture
async def llm_client(llm: FakeLLM) -> AsyncIterator[LLMClient]:
    """The real LLM client pointed at the fake LLM, without retries."""
    client = LLMClient(base_url=llm.base_url, api_key="k", model="m", max_retries=0)
    yield client
    await client.close()
