"""deploy/docker-compose.scale.yml: valid compose, the sandbox services locked down and reachable only by the
bot with the token, the bot pointed at PostgreSQL and every sandbox; its health check against a real
service on TCP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from core_tools.sandbox import Isolation, detect_isolation
from tests.deploy.test_sandbox_pool import TOKEN, TcpService
from tests.deploy.test_service import REPO

DEPLOY = REPO / "deploy"
HERE = Path(__file__).resolve().parent


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "docker-compose.scale.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_scale_compose_is_valid_against_the_compose_specification() -> None:
    schema = json.loads((HERE / "compose-spec.json").read_text())
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(_compose()), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


def test_sandboxes_hold_only_the_token_and_reach_nothing() -> None:
    compose = _compose()
    sandboxes = {k: v for k, v in compose["services"].items() if k.startswith("sandbox")}
    assert len(sandboxes) >= 2
    assert compose["networks"]["sandboxes"]["internal"] is True
    for service in sandboxes.values():
        assert "env_file" not in service and set(service["environment"]) == {"CODE_SANDBOX_TOKEN"}
        assert service["environment"]["CODE_SANDBOX_TOKEN"].startswith("${CODE_SANDBOX_TOKEN:?")
        assert "volumes" not in service and "ports" not in service and service["networks"] == ["sandboxes"]
        assert (
            service["read_only"] is True
            and service["cap_drop"] == ["ALL"]
            and service["user"] == "10001:10001"
        )
        assert {"no-new-privileges:true", "seccomp=./seccomp-bwrap.json"} <= set(service["security_opt"])
        command = service["command"]
        assert command[command.index("--listen") + 1] == "0.0.0.0:8700"
        runs = int(command[command.index("--max-concurrent") + 1])
        run_mb = int(command[command.index("--memory-mb") + 1])
        assert int(str(service["mem_limit"])[:-1]) * 1024 >= runs * run_mb + 1024
    bot = compose["services"]["bot"]
    urls = bot["environment"]["CODE_SANDBOX_URLS"].split(",")
    assert urls == [f"tcp://{name}:8700" for name in sorted(sandboxes)]
    assert bot["environment"]["CODE_SANDBOX_TOKEN"] == "${CODE_SANDBOX_TOKEN:?set CODE_SANDBOX_TOKEN}"
    assert bot["environment"]["CODE_SANDBOX_SOCKET"] == "", "a socket from .env would win over the pool"
    assert set(bot["networks"]) == {"default", "sandboxes"}


def test_bot_uses_postgresql_with_pgvector() -> None:
    services = _compose()["services"]
    bot, db = services["bot"], services["db"]
    assert bot["environment"]["DATABASE_URL"].startswith(
        "postgresql+psycopg://assistant:${POSTGRES_PASSWORD:?"
    )
    assert bot["environment"]["DATABASE_URL"].endswith("@db/assistant")
    assert bot["depends_on"]["db"]["condition"] == "service_healthy"
    assert db["image"].startswith("docker.io/pgvector/pgvector:") and "latest" not in db["image"]
    assert "ports" not in db and db["environment"]["POSTGRES_DB"] == "assistant"
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])


@pytest.mark.skipif(detect_isolation()[0] is not Isolation.BWRAP, reason="no working bwrap")
def test_sandbox_health_check_pings_over_tcp_with_the_token() -> None:
    test = _compose()["services"]["sandbox1"]["healthcheck"]["test"]
    service = TcpService("--timeout", "10").wait_up()
    try:
        argv = [sys.executable, *test[2:]]  # ["CMD", "python", ...] as the container runs it
        argv[argv.index("--listen") + 1] = f"127.0.0.1:{service.port}"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        ok = subprocess.run(
            argv, cwd=REPO, env={**env, "CODE_SANDBOX_TOKEN": TOKEN}, capture_output=True, text=True
        )
        assert ok.returncode == 0 and "bwrap" in ok.stdout, ok.stderr
        wrong = subprocess.run(
            argv, cwd=REPO, env={**env, "CODE_SANDBOX_TOKEN": "x"}, capture_output=True, text=True
        )
        assert wrong.returncode == 1 and "refused the token" in wrong.stderr
    finally:
        service.stop()
