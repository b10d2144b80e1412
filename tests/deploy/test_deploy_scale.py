"""deploy/docker-compose.scale.yml without Docker: valid against the Compose Specification, and the sandbox's
health check against a real service on TCP. The file itself runs for real in test_compose_scale.py."""

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


@pytest.mark.slow  # a sandbox service process
@pytest.mark.skipif(detect_isolation()[0] is not Isolation.BWRAP, reason="no working bwrap")
def test_sandbox_health_check_pings_over_tcp_with_the_token(tmp_path: Path) -> None:
    test = _compose()["services"]["sandbox1"]["healthcheck"]["test"]
    service = TcpService("--timeout", "10").wait_up()
    try:
        # ["CMD", "healthcheck", "60", "python", ...] as the container runs it, deploy/healthcheck included
        # (which passes on the output, stderr included, as Docker's health log shows it).
        assert test[:4] == ["CMD", "healthcheck", "60", "python"], test
        argv = [str(DEPLOY / "healthcheck"), test[2], sys.executable, *test[4:]]
        argv[argv.index("--listen") + 1] = f"127.0.0.1:{service.port}"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        ok = subprocess.run(
            argv,
            cwd=REPO,
            env={**env, "CODE_SANDBOX_TOKEN": TOKEN, "HEALTHCHECK_STATE": str(tmp_path / "ok")},
            capture_output=True,
            text=True,
        )
        assert ok.returncode == 0 and "bwrap" in ok.stdout, ok.stdout + ok.stderr
        wrong = subprocess.run(
            argv,
            cwd=REPO,
            env={**env, "CODE_SANDBOX_TOKEN": "x", "HEALTHCHECK_STATE": str(tmp_path / "wrong")},
            capture_output=True,
            text=True,
        )
        assert wrong.returncode == 1 and "refused the token" in wrong.stdout, wrong.stdout + wrong.stderr
    finally:
        service.stop()
