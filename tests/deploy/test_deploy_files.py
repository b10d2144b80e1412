"""The deployment files: the compose file against the Compose specification, the seccomp profile against
Docker's default, the SearXNG settings, and the Dockerfile's install step replayed in a fresh venv.

Nothing is built or started here: tests/deploy/test_compose_up.py runs the deploy for real on a Docker
engine (scripts/test-deploy.sh), outside the default test command.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
HERE = Path(__file__).resolve().parent
# What bwrap needs beyond Docker's default profile (measured in a real container by
# tests/deploy/test_compose_up.py): new namespaces (clone/clone3 with CLONE_NEW* flags, unshare, setns),
# building its root (mount, umount2, pivot_root) and naming its uts namespace (sethostname; setdomainname
# goes with it, as in Docker's own CAP_SYS_ADMIN rule).
BWRAP_SYSCALLS = {
    "clone",
    "clone3",
    "mount",
    "pivot_root",
    "setdomainname",
    "sethostname",
    "setns",
    "umount2",
    "unshare",
}
SOCKET = "/run/sandbox/sandbox.sock"


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in (DEPLOY / "Dockerfile").read_text().splitlines():
        if raw.strip().startswith("#") or not raw.strip():
            continue
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        lines.append(pending + raw)
        pending = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip()) for line in lines]


# --- compose ---------------------------------------------------------------------------------------


def test_compose_file_is_valid_against_the_compose_specification() -> None:
    schema = json.loads((HERE / "compose-spec.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(_compose()), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


def test_compose_file_fails_the_schema_when_wrong() -> None:
    """The check above can fail: a misspelt key is caught."""
    schema = json.loads((HERE / "compose-spec.json").read_text())
    broken = _compose()
    broken["services"]["sandbox"]["network-mode"] = "none"
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken))


def test_bot_service() -> None:
    bot = _compose()["services"]["bot"]
    # The README's Ollama/vLLM examples reach the host by this name, which Linux engines only map on request.
    assert "host.docker.internal:host-gateway" in bot["extra_hosts"]
    assert bot["env_file"] == "../.env" and (DEPLOY / "../.env.example").exists()
    assert bot["restart"] == "unless-stopped" and bot["init"] is True
    assert "ports" not in bot, "long polling: nothing published"
    assert bot["environment"]["SEARXNG_URL"] == "http://searxng:8080"
    assert bot["environment"]["CODE_SANDBOX_SOCKET"] == SOCKET
    assert {"data:/app/data", "sandbox-socket:/run/sandbox"} <= set(bot["volumes"])


def test_sandbox_service_holds_nothing_and_is_locked_down() -> None:
    compose = _compose()
    sandbox = compose["services"]["sandbox"]
    assert "env_file" not in sandbox and "environment" not in sandbox, "no secrets in the sandbox"
    assert sandbox["volumes"] == ["sandbox-socket:/run/sandbox"], "no database volume"
    assert sandbox["network_mode"] == "none" and "ports" not in sandbox and "networks" not in sandbox
    assert sandbox["read_only"] is True and any(t.startswith("/tmp") for t in sandbox["tmpfs"])
    assert sandbox["cap_drop"] == ["ALL"] and "cap_add" not in sandbox and not sandbox.get("privileged")
    assert sandbox["user"] == "10001:10001" and sandbox["init"] is True
    assert sandbox["pids_limit"] > 0 and sandbox["mem_limit"]
    opts = sandbox["security_opt"]
    assert {"no-new-privileges:true", "seccomp=./seccomp-bwrap.json", "systempaths=unconfined"} <= set(opts)
    assert "seccomp=unconfined" not in opts
    # Compose resolves the profile relative to the compose file's directory.
    assert (DEPLOY / "seccomp-bwrap.json").is_file()
    command = sandbox["command"]
    assert command[:3] == ["python", "-m", "core_tools.sandbox.service"]
    assert command[command.index("--socket") + 1] == SOCKET
    assert SOCKET in " ".join(sandbox["healthcheck"]["test"])
    # The container bounds the service as a whole: every run at its memory limit, plus about 1 GB for the
    # service, /tmp and page cache (the per-run bound inside cannot use cgroups: /sys/fs/cgroup is read-only).
    runs = int(command[command.index("--max-concurrent") + 1])
    run_mb = int(command[command.index("--memory-mb") + 1])
    limit = str(sandbox["mem_limit"])
    limit_mb = int(limit[:-1]) * {"m": 1, "g": 1024}[limit[-1].lower()]
    assert limit_mb >= runs * run_mb + 1024, (runs, run_mb, limit)
    assert set(compose["volumes"]) == {"data", "sandbox-socket"}


def test_searxng_service_is_pinned_private_and_configured() -> None:
    searxng = _compose()["services"]["searxng"]
    tag = r"(docker\.io/)?searxng/searxng:\d{4}\.\d{1,2}\.\d{1,2}-[0-9a-f]{7,}"
    assert re.fullmatch(tag, searxng["image"]), "a release tag, never latest"
    assert "ports" not in searxng and "env_file" not in searxng, "private, and no bot secrets"
    host, container = searxng["volumes"][0].split(":")[:2]
    assert container == "/etc/searxng/settings.yml" and (DEPLOY / host).is_file()
    assert "SEARXNG_SECRET" in searxng["environment"]
    assert "export SEARXNG_SECRET" in searxng["entrypoint"][-1]
    settings = yaml.safe_load((DEPLOY / "searxng" / "settings.yml").read_text())
    assert settings["use_default_settings"] is True
    assert "json" in settings["search"]["formats"], "the bot reads format=json"
    assert settings["server"]["limiter"] is False
    assert "secret_key" not in settings["server"], "the secret comes from SEARXNG_SECRET, never from git"


def test_one_image_builds_from_the_repository_root() -> None:
    services = _compose()["services"]
    assert services["bot"]["image"] == services["sandbox"]["image"]
    build = services["bot"]["build"]
    assert (DEPLOY / build["context"]).resolve() == REPO
    assert (REPO / build["dockerfile"]).resolve() == (DEPLOY / "Dockerfile").resolve()


# --- Dockerfile ------------------------------------------------------------------------------------


def test_dockerfile_shape() -> None:
    instructions = _dockerfile_instructions()
    froms = [args for op, args in instructions if op == "FROM"]
    base = next(args.split("=", 1)[1] for op, args in instructions if op == "ARG" and "PYTHON_IMAGE=" in args)
    assert re.fullmatch(r"python:3\.1[1-3]-slim-bookworm", base), "official slim Debian (sqlite-vec: no musl)"
    assert len(froms) == 2, "build stage + runtime stage"
    runs = " ".join(args for op, args in instructions if op == "RUN")
    assert "bubblewrap" in runs and "useradd" in runs
    users = [args for op, args in instructions if op == "USER"]
    assert users and users[-1] not in ("root", "0")
    env = " ".join(args for op, args in instructions if op == "ENV")
    assert "PYTHONUNBUFFERED=1" in env
    health = next(args for op, args in instructions if op == "HEALTHCHECK")
    assert '"bot", "doctor", "--quick"' in health
    assert not any(op == "VOLUME" for op, _ in instructions), "the sandbox must not get a data volume"
    for op, args in instructions:
        if op == "COPY" and "--from=" not in args:
            *sources, _dest = shlex.split(args)
            for source in sources:
                assert (REPO / source).exists(), f"COPY {source}: not in the repository"
                assert not _dockerignored(source), f"COPY {source} is excluded by .dockerignore"


def _dockerignored(path: str) -> bool:
    patterns = [p.strip() for p in (REPO / ".dockerignore").read_text().splitlines()]
    return any(p and not p.startswith(("#", "!")) and path.rstrip("/") == p.rstrip("/") for p in patterns)


def test_dockerignore_keeps_secrets_and_state_out() -> None:
    patterns = {p.strip() for p in (REPO / ".dockerignore").read_text().splitlines()}
    assert {".env", "data/", ".venv/", ".git/"} <= patterns
    assert any("__pycache__" in p for p in patterns)


def _uv_sync_args() -> list[str]:
    """The arguments of the Dockerfile's `uv sync` line."""
    for op, args in _dockerfile_instructions():
        if op == "RUN" and "uv sync" in args:
            words = shlex.split(args)
            return words[words.index("uv") + 1 :]
    raise AssertionError("no `uv sync` in the Dockerfile")


@pytest.mark.slow  # installs the package into a fresh venv
def test_dockerfile_install_step_replayed_in_a_fresh_venv(tmp_path: Path) -> None:
    """`uv sync --frozen --no-dev` from uv.lock alone, then the app imports and migrates with that venv.

    About 10 s with uv's cache warm (not marked slow); a cold cache downloads the wheels once.
    """
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    args = _uv_sync_args()
    assert args[0] == "sync" and "--frozen" in args and "--no-dev" in args
    project = tmp_path / "build"
    project.mkdir()
    for name in ("pyproject.toml", "uv.lock"):  # what the Dockerfile's build stage copies
        shutil.copy(REPO / name, project / name)
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_"))}
    env |= {
        "UV_PROJECT_ENVIRONMENT": str(venv),
        "UV_PYTHON": str(Path(sys.base_prefix) / "bin" / "python3"),
        "UV_PYTHON_DOWNLOADS": "never",
    }
    done = subprocess.run([uv, *args], cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    python = venv / "bin" / "python"
    check = (
        "import importlib.util, sys\n"
        "import bot.__main__, bot.adapter.app, bot.process.wiring, core_tools.sandbox.service, db.engine\n"
        "from db.migrate import upgrade\n"
        "from db.engine import make_engine\n"
        "url = 'sqlite:///' + sys.argv[1]\n"
        "upgrade(url)\n"
        "with make_engine(url).connect() as c:\n"
        "    print('vec', c.exec_driver_sql('select vec_version()').scalar())\n"
        "for dev in ('pytest', 'ruff', 'mypy'):\n"  # jsonschema is a runtime dependency (MCP tool schemas)
        "    assert importlib.util.find_spec(dev) is None, dev + ' must not be in the image'\n"
        "print('ok')\n"
    )
    ran = subprocess.run(
        [str(python), "-c", check, str(tmp_path / "app.db")],
        cwd=REPO,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.splitlines()[-1] == "ok" and "vec v" in ran.stdout


# --- seccomp ---------------------------------------------------------------------------------------


def _profiles() -> tuple[dict[str, Any], dict[str, Any]]:
    default = json.loads((HERE / "docker-default-seccomp.json").read_text())
    bwrap = json.loads((DEPLOY / "seccomp-bwrap.json").read_text())
    return default, bwrap


def test_seccomp_profile_is_dockers_default_plus_only_what_bwrap_needs() -> None:
    default, bwrap = _profiles()
    assert {k: v for k, v in bwrap.items() if k != "syscalls"} == {
        k: v for k, v in default.items() if k != "syscalls"
    }, "same default action, errno and architectures"
    first_default, first_bwrap = default["syscalls"][0], bwrap["syscalls"][0]
    assert first_bwrap["action"] == "SCMP_ACT_ALLOW" and set(first_bwrap) == {"names", "action"}
    assert set(first_bwrap["names"]) - set(first_default["names"]) == BWRAP_SYSCALLS
    assert set(first_default["names"]) <= set(first_bwrap["names"])

    # Every other rule is kept unchanged, in order, except the ones the unconditional allow supersedes:
    # the flag-masked `clone` allows and `clone3` -> ENOSYS that Docker applies to containers without
    # CAP_SYS_ADMIN. Left in, they would be a second, conflicting rule for the same syscall.
    rest_default, rest_bwrap = default["syscalls"][1:], bwrap["syscalls"][1:]
    dropped = [rule for rule in rest_default if rule not in rest_bwrap]
    assert [rule for rule in rest_default if rule not in dropped] == rest_bwrap
    assert sorted(name for rule in dropped for name in rule["names"]) == ["clone", "clone", "clone3"]
    for rule in dropped:
        assert rule["excludes"]["caps"] == ["CAP_SYS_ADMIN"], "only the rules for containers without it"


def test_seccomp_profile_has_no_conflicting_rule_for_an_unprivileged_container() -> None:
    """With cap_drop ALL, rules that `includes` a capability do not apply; no other names bwrap's calls."""
    _default, bwrap = _profiles()
    for rule in bwrap["syscalls"][1:]:
        if rule.get("includes", {}).get("caps"):
            continue
        assert not set(rule["names"]) & BWRAP_SYSCALLS, rule


def test_vendored_files_are_the_upstream_ones() -> None:
    """Guard against a hand-edited vendored copy: shapes and sizes of the upstream files."""
    default, _ = _profiles()
    assert default["defaultAction"] == "SCMP_ACT_ERRNO" and len(default["syscalls"]) == 31
    assert len((HERE / "docker-default-seccomp.json").read_text()) == 12782
    spec = json.loads((HERE / "compose-spec.json").read_text())
    assert spec["title"] == "Compose Specification" and "service" in spec["definitions"]
    assert len((HERE / "compose-spec.json").read_text()) == 74133
