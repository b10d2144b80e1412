"""Shared fixtures: the loopback fakes and the test database, once per database (SQLite and PostgreSQL).

Every test that takes `engine` (or `db_sessions`, or `database_url`) runs twice, against a migrated SQLite
file and a migrated PostgreSQL database, so both stay equal. `TEST_DATABASES=sqlite` runs SQLite only; a
test marked `sqlite_only` checks SQLite's own parts (FTS5, sqlite-vec, PRAGMAs), one marked `postgresql_only`
PostgreSQL's (pgvector, the tsvector index).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from core_tools.llm import LLMClient
from core_tools.sandbox.toolkit import ToolkitError, install_blocking
from db.engine import make_engine, make_sessionmaker
from db.migrate import upgrade
from tests.support import harness
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.search import FakeServer, reply_json, searxng_payload, searxng_result
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import TOKEN
from tests.support.postgres import TestPostgres

DATABASES = ("sqlite", "postgresql")


def test_databases() -> list[str]:
    """The databases the suite runs against (TEST_DATABASES=sqlite,postgresql; both by default)."""
    wanted = os.environ.get("TEST_DATABASES", ",".join(DATABASES))
    return [d for d in DATABASES if d in wanted.split(",")]


REPO = Path(__file__).resolve().parents[1]


def sandbox_visible_dir(name: str) -> Path:
    """A directory for the tests' own toolkits that code runs can see: when the suite runs as root (the code
    then runs as nobody, and bwrap mounts the toolkit as nobody), below directories anyone may enter.
    `ASSISTANT_TEST_CACHE` chooses another."""
    chosen = os.environ.get("ASSISTANT_TEST_CACHE")
    if chosen:
        return Path(chosen) / name
    base = REPO / ".cache"
    if os.geteuid() == 0 and not all(os.stat(p).st_mode & 0o001 for p in REPO.parents if p != Path("/")):
        base = Path("/var/cache/assistant-tests")
    return base / name


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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sqlite_only: checks SQLite's own parts; not run on PostgreSQL")
    config.addinivalue_line("markers", "postgresql_only: checks PostgreSQL's own parts; not run on SQLite")


def _runs_the_bot(metafunc: pytest.Metafunc) -> bool:
    # An end-to-end test: it takes the fake Bot API and runs the bot through tests/support/harness.py itself.
    return "tg" in metafunc.fixturenames and "running_bot" in metafunc.function.__code__.co_names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize every database-touching test over the databases (end-to-end bot tests too)."""
    if "db_kind" not in metafunc.fixturenames and _runs_the_bot(metafunc):
        metafunc.fixturenames.append("db_kind")  # read by _harness_database
    if "db_kind" in metafunc.fixturenames:
        kinds = test_databases()
        if metafunc.definition.get_closest_marker("sqlite_only"):
            kinds = [k for k in kinds if k == "sqlite"]
        if metafunc.definition.get_closest_marker("postgresql_only"):
            kinds = [k for k in kinds if k == "postgresql"]
        metafunc.parametrize("db_kind", kinds)


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


@pytest.fixture(autouse=True)
def _harness_database(request: pytest.FixtureRequest) -> Iterator[None]:
    """The PostgreSQL run of an end-to-end test: the harness's bot uses a fresh PostgreSQL database."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is None or callspec.params.get("db_kind") != "postgresql" or "tg" not in request.fixturenames:
        yield
        return
    harness.DATABASE_URL = request.getfixturevalue("database_url")
    try:
        yield
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
    """An engine over a fresh database migrated to head by Alembic (each database in turn)."""
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
