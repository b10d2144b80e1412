"""Operations against a real PostgreSQL through the real entry point: doctor checks the server and pgvector,
backup explains pg_dump, and a password in DATABASE_URL is never printed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.support.postgres import TestPostgres
from tests.support.processes import bot_env, run_bot

pytestmark = pytest.mark.slow  # `python -m bot` processes against PostgreSQL


@pytest.fixture
def pg_url(postgres: TestPostgres) -> Iterator[str]:
    """A fresh empty database, reached as a role with a password (like a real deployment)."""
    url = postgres.new_database(migrated=False)
    name = make_url(url).database
    with psycopg.connect(postgres.admin_uri, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS assistant")
        conn.execute("CREATE ROLE assistant LOGIN SUPERUSER PASSWORD 'pg-s3cret-pw'")
        conn.execute(f"ALTER DATABASE {name} OWNER TO assistant")  # type: ignore[arg-type]
    yield make_url(url).set(username="assistant", password="pg-s3cret-pw").render_as_string(False)
    postgres.drop_database(url)


async def test_doctor_checks_postgresql_and_pgvector(tmp_path: Path, pg_url: str) -> None:
    env = bot_env(tmp_path, DATABASE_URL=pg_url, OPENAI_API_KEY="sk-test")
    code, out, err = await run_bot(tmp_path, "doctor", "--quick", env=env, timeout=120)
    assert code == 0, out + err
    assert "ok   database:" in out and "at revision" in out
    assert "ok   postgresql: PostgreSQL 18" in out and "pgvector 0." in out
    assert "pg-s3cret-pw" not in out + err

    down = "postgresql+psycopg://assistant:wrong-pw@127.0.0.1:9/assistant"  # nothing listens there
    broken = bot_env(tmp_path, DATABASE_URL=down, OPENAI_API_KEY="k")
    code, out, err = await run_bot(tmp_path, "doctor", "--quick", env=broken, timeout=120)
    assert code == 1 and "FAIL database: OperationalError" in out and "FAIL postgresql:" in out
    assert "wrong-pw" not in out + err and "Traceback" not in out + err


async def test_backup_explains_pg_dump(tmp_path: Path, pg_url: str) -> None:
    env = bot_env(tmp_path, DATABASE_URL=pg_url, OPENAI_API_KEY="sk-test")
    code, out, err = await run_bot(tmp_path, "backup", str(tmp_path / "b.db"), env=env)
    assert code == 1 and "back it up with pg_dump" in err and "pg_restore" in err
    assert "postgresql://assistant@" in err and "pg-s3cret-pw" not in out + err
    assert not (tmp_path / "b.db").exists()
