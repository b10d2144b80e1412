"""The Docker deploy for real: build the image with the Dockerfile's own `docker build` command and the legacy
builder, `docker compose up` deploy/docker-compose.yml as shipped (plus tests/deploy/compose.test.yml, which
puts the bot on the host's network and stands in for SearXNG), check the shipped health checks, and drive a
code turn from the fake Bot API through the bot container, the fake LLM and bwrap in the sandbox container.

Minutes of work and a Docker engine with Compose v2: it runs only with DEPLOY_TEST=1, which
scripts/test-deploy.sh sets (see deploy/README.md). The base images must be local or pullable; where they
cannot be pulled, scripts/local-base-images.sh builds them (docs/docker-on-test-hosts.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
IMAGE = "telegram-assistant:deploytest"
TOKEN = "123456:DEPLOY-TEST-token"
OWNER = 111
# What bwrap's namespaces make of the program: its own hostname, the unprivileged uid, and work done.
PROGRAM = "import os, socket\nprint(socket.gethostname(), os.getuid(), sum(range(10**6)))"
PRINTED = "sandbox 65534 499999500000"
# Four children that each touch 300 MB: every one is under the per-process limit, together they are not.
MEMORY_HOG = (
    "import os, time\n"
    "for _ in range(4):\n"
    "    if os.fork() == 0:\n"
    "        b = bytearray(300 * 1024 * 1024)\n"
    "        for i in range(0, len(b), 4096): b[i] = 1\n"
    "        time.sleep(30); os._exit(0)\n"
    "for _ in range(4): os.wait()\n"
    "print('all done')"
)

pytestmark = [
    pytest.mark.slow,  # Docker
    pytest.mark.skipif(
        os.environ.get("DEPLOY_TEST") != "1", reason="the Docker deploy test runs with scripts/test-deploy.sh"
    ),
]


def _free_port() -> int:
    """A port nothing listens on right now, for the SearXNG stand-in on the host's network."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# The shipped file and the test's override of it (test_compose_scale.py runs the scale deploy's pair).
SINGLE = (REPO / "deploy" / "docker-compose.yml", HERE / "compose.test.yml")


@dataclass
class Stack:
    """One compose project: the shipped file, the test override, and any further overrides."""

    project: str
    env: dict[str, str]
    overrides: tuple[Path, ...] = ()
    files: tuple[Path, ...] = SINGLE

    def argv(self, *args: str) -> list[str]:
        """A `docker compose` command line for this project."""
        files = [*self.files, *self.overrides]
        return ["docker", "compose", "-p", self.project, *(a for f in files for a in ("-f", str(f))), *args]

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """Run `docker compose ARGS`; fail the test with its output if it fails."""
        done = subprocess.run(
            self.argv(*args), env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert done.returncode == 0, f"docker compose {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done

    async def arun(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """`run` off the event loop, so that the fakes keep answering the bot meanwhile."""
        return await asyncio.to_thread(self.run, *args, timeout=timeout)

    def container(self, service: str) -> str:
        """The container id of one service."""
        return self.run("ps", "-q", "--all", service).stdout.strip()

    def inspect(self, service: str, what: str) -> dict[str, Any]:
        """One part of `docker inspect` of one service's container, e.g. `.State.Health`."""
        done = subprocess.run(
            ["docker", "inspect", "--format", "{{json " + what + "}}", self.container(service)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        record: dict[str, Any] = json.loads(done.stdout)
        return record

    def health(self, service: str) -> dict[str, Any]:
        """Docker's health record of one service's container (Status, FailingStreak, Log)."""
        return self.inspect(service, ".State.Health")

    async def wait_health(self, service: str, status: str, timeout: float = 180) -> dict[str, Any]:
        """Poll the health record until it reaches `status` (docker's own health checks do the probing)."""
        deadline = time.monotonic() + timeout
        record = await asyncio.to_thread(self.health, service)
        while record["Status"] != status:
            if time.monotonic() > deadline or (record["Status"] in ("healthy", "unhealthy")):
                logs = await asyncio.to_thread(self.run, "logs", "--no-color", service)
                raise AssertionError(
                    f"{service} is {record['Status']}, not {status}: {record}\n{logs.stdout}"
                )
            await asyncio.sleep(0.5)
            record = await asyncio.to_thread(self.health, service)
        return record

    async def wait_restarted(self, service: str, before: int, timeout: float = 240) -> str:
        """Poll until the container's restart count passes `before` (its restart policy started it again);
        the output of the failed probes seen while it was unhealthy, in order."""
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        while True:
            count = await asyncio.to_thread(self.inspect, service, ".RestartCount")
            if int(str(count)) > before:
                return "\n".join(seen)
            state = await asyncio.to_thread(self.inspect, service, ".State")
            health = state.get("Health") or {}
            for probe in health.get("Log") or []:
                line = str(probe.get("Output", "")).strip()
                if probe.get("ExitCode") != 0 and line and line not in seen:
                    seen.append(line)
            if time.monotonic() > deadline:
                raise AssertionError(f"{service} was not restarted within {timeout:.0f} s: {state}\n{seen}")
            await asyncio.sleep(0.5)

    def down(self) -> None:
        """Remove the containers and the volumes (the images go once the module is done)."""
        subprocess.run(
            self.argv("down", "-v", "--remove-orphans", "-t", "10"),
            env=self.env,
            capture_output=True,
            timeout=300,
            check=False,
        )


def _stack(project: str, env_file: Path) -> Stack:
    """A compose project with the test override's variables set."""
    env = {
        **os.environ,
        "DEPLOYTEST_IMAGE": IMAGE,
        "DEPLOYTEST_ENV_FILE": str(env_file),
        "DEPLOYTEST_SEARXNG_PORT": str(_free_port()),
        "DEPLOYTEST_DIR": str(HERE),
    }
    return Stack(project, env)


def documented_build() -> list[str]:
    """The build command of the Dockerfile's header, tagged for this test and on the host's network (the test
    machines have no bridge network)."""
    prefix = "# Build from the repository root:"
    line = next(x for x in (REPO / "deploy" / "Dockerfile").read_text().splitlines() if x.startswith(prefix))
    argv = shlex.split(line.removeprefix(prefix))
    assert argv[:2] == ["docker", "build"] and argv[-1] == ".", line
    argv[argv.index("-t") + 1] = IMAGE
    return [*argv[:2], "--network", "host", *argv[2:]]


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Build the image once with the Dockerfile's own command and the legacy builder (what Engine 20.10
    without buildx uses; Compose builds it with BuildKit in test_compose_scale.py), and the SearXNG stand-in;
    remove both at the end (the base images stay)."""
    if shutil.which("docker") is None:
        pytest.fail("DEPLOY_TEST=1 but no docker client")
    built = subprocess.run(
        documented_build(),
        cwd=REPO,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert built.returncode == 0, f"{' '.join(documented_build())}:\n{built.stdout[-5000:]}\n{built.stderr}"
    env_file = tmp_path_factory.mktemp("build") / "empty.env"
    env_file.touch()
    _stack(f"ta-deploytest-build-{os.getpid()}", env_file).run("build", "searxng")
    yield
    subprocess.run(
        ["docker", "image", "rm", IMAGE, f"{IMAGE}-searxng"], capture_output=True, timeout=300, check=False
    )


@pytest.fixture
def stack(images: None, tmp_path: Path) -> Iterator[Stack]:
    """A compose project of this test, removed with its volumes afterwards."""
    env_file = tmp_path / "test.env"
    env_file.touch()  # written by the test once the fakes have their ports
    made = _stack(f"ta-deploytest-{os.getpid()}", env_file)
    try:
        yield made
    finally:
        made.down()


def _answer_with_the_output(request: dict[str, Any]) -> Any:
    """The fake model's second reply quotes what the sandbox printed, so the test sees it went through."""
    result = json.loads(request["messages"][-1]["content"])
    return text(f"The program printed: {result['stdout'].strip()} (isolation: {result['isolation']}). END")


async def _code_turn(tg: FakeTelegram, llm: FakeLLM, question: str, program: str = PROGRAM) -> str:
    """One user message -> the model asks for `code` -> the sandbox runs it -> the answer is delivered."""
    llm.script(tool_calls(call("code", {"action": "execute", "code": program})), _answer_with_the_output)
    before = len(tg.sent_texts(OWNER))
    tg.push_text(OWNER, question)

    def answered() -> str | None:
        # The answer streams in edits: wait for its last word.
        return next((t for t in tg.sent_texts(OWNER)[before:] if t.endswith("END")), None)

    answer: str = await tg.wait_for(answered, timeout=120, what="the code turn's answer")
    return answer


def write_test_env(
    path: Path, tg: FakeTelegram, llm: FakeLLM, *, token: str, users: Sequence[int], key: str
) -> None:
    """The test's .env: the bot (`token`) against the fake Bot API and the fake LLM on 127.0.0.1, serving
    `users`."""
    lines = [
        f"TELEGRAM_BOT_TOKEN={token}",
        f"TELEGRAM_API_BASE_URL={tg.base_url}",
        f"ALLOWED_USER_IDS={','.join(map(str, users))}",
        f"OPENAI_API_KEY={key}",
        f"OPENAI_BASE_URL={llm.base_url}",
        "LLM_MODEL=fake-model",
        "LLM_MAX_RETRIES=0",
        "STREAM_EDIT_INTERVAL_S=0",
    ]
    path.write_text("\n".join(lines) + "\n")


async def test_compose_up_runs_code_in_bwrap_end_to_end(stack: Stack, tmp_path: Path) -> None:
    async with FakeTelegram(token=TOKEN) as tg, FakeLLM() as llm:
        write_test_env(tmp_path / "test.env", tg, llm, token=TOKEN, users=[OWNER], key="sk-deploy-test")
        # The probe's limits for a stuck process (deploy/healthcheck), shorter than shipped: stale after 15 s,
        # stopped after 30 s, so that the probes see it unhealthy before the stop.
        with (tmp_path / "test.env").open("a") as env:
            env.write("HEALTH_STALE_S=15\nHEALTH_RESTART_S=30\n")
        started = time.monotonic()
        await stack.arun("up", "-d")
        assert (await stack.wait_health("sandbox", "healthy"))["Status"] == "healthy"
        assert (await stack.wait_health("bot", "healthy"))["Status"] == "healthy"
        healthy = time.monotonic()
        # The shipped health checks, as Docker runs them: a probe every 5 s (so `dc ps` says healthy within
        # about 5 s of the service being ready, not after a minute of "starting"), the real check through
        # deploy/healthcheck, which runs it at most once a minute once it has passed.
        for service, check in (
            ("bot", ["--file", "/tmp/bot-health", "bot", "doctor", "--quick"]),
            ("sandbox", ["--ping"]),
        ):
            config = await asyncio.to_thread(stack.inspect, service, ".Config.Healthcheck")
            assert config["Interval"] == 5 * 10**9, (service, config)
            assert config["Test"][:3] == ["CMD", "healthcheck", "60"], (service, config)
            assert all(word in config["Test"] for word in check), (service, config)

        first = await _code_turn(tg, llm, "what does this program print?")
        turned = time.monotonic()
        assert PRINTED in first and "isolation: bwrap" in first, first
        # What the model was sent: the sandbox service's result (the bot's own container cannot run bwrap).
        sent = json.loads(llm.requests[1]["messages"][-1]["content"])
        assert sent["success"] is True and sent["stdout"] == PRINTED + "\n" and sent["isolation"] == "bwrap"

        # A run that forks and allocates more than CODE_MEMORY_MB (512) in all is stopped as a whole, here
        # by the watchdog (the container's /sys/fs/cgroup is read-only), and the service stays healthy.
        hog = len(llm.requests)
        await _code_turn(tg, llm, "allocate a lot", MEMORY_HOG)
        hogged = json.loads(llm.requests[hog + 1]["messages"][-1]["content"])
        assert hogged["success"] is False and hogged["error_category"] == "memory", hogged
        assert "memory limit of 512 MB for the whole run" in hogged["stderr"], hogged
        assert (await stack.wait_health("sandbox", "healthy"))["Status"] == "healthy"

        hosts = await stack.arun("exec", "-T", "bot", "cat", "/etc/hosts")
        assert "host.docker.internal" in hosts.stdout, "extra_hosts reaches the bot's /etc/hosts"

        restarting = time.monotonic()
        await stack.arun("restart", timeout=300)
        await stack.wait_health("sandbox", "healthy")
        await stack.wait_health("bot", "healthy")
        restarted = time.monotonic()
        before = len(llm.requests)
        again = await _code_turn(tg, llm, "and after a restart?")
        assert PRINTED in again and len(llm.requests) >= before + 2
        # The conversation survived the restart in the data volume: the first question is in the history.
        history = json.dumps(llm.requests[before]["messages"])
        assert "what does this program print?" in history

        # A bot process that hangs (SIGSTOP: its event loop runs no more, as a blocked one would not): its
        # heartbeat (HEALTH_FILE) goes stale, the probes say so and the container turns unhealthy, the health
        # check stops the process once it has been stuck for HEALTH_RESTART_S (test.env: 30 s), and the
        # restart policy starts it again; the next message is answered.
        hanging = time.monotonic()
        heartbeat = await stack.arun("exec", "-T", "bot", "cat", "/tmp/bot-health")
        pid = next(line.split()[1] for line in heartbeat.stdout.splitlines() if line.startswith("pid "))
        restarts = int(str(await asyncio.to_thread(stack.inspect, "bot", ".RestartCount")))
        await stack.arun("exec", "-T", "bot", "sh", "-c", f"kill -STOP {pid}")  # the image has no kill(1)
        seen_unhealthy = await stack.wait_restarted("bot", restarts, timeout=240)
        assert "has not written its heartbeat" in seen_unhealthy, seen_unhealthy
        await stack.wait_health("bot", "healthy")
        healed = time.monotonic()
        before = len(llm.requests)
        after_hang = await _code_turn(tg, llm, "and after a hang?")
        assert PRINTED in after_hang and len(llm.requests) >= before + 2
        print(
            f"up -> both healthy {healthy - started:.1f} s; code turn {turned - healthy:.1f} s; "
            f"restart -> both healthy {restarted - restarting:.1f} s; a hung bot restarted and healthy "
            f"{healed - hanging:.1f} s after it hung"
        )


async def test_health_check_fails_when_the_sandbox_cannot_isolate(stack: Stack, tmp_path: Path) -> None:
    """The sandbox under Docker's default seccomp profile: bwrap cannot make its namespaces, so unhealthy."""
    default_seccomp = tmp_path / "default-seccomp.yml"
    default_seccomp.write_text(
        "services:\n"
        "  sandbox:\n"
        "    security_opt: !override\n"
        "      - no-new-privileges:true\n"
        "      - systempaths=unconfined\n"
        "      - apparmor=unconfined\n"
        "    healthcheck:\n"
        "      start_period: 1s\n"  # 0s would mean unset: the image's 60 s would apply
    )
    stack.overrides = (default_seccomp,)
    await stack.arun("up", "-d", "--no-deps", "sandbox")
    record = await stack.wait_health("sandbox", "unhealthy", timeout=120)
    output = record["Log"][-1]["Output"]
    assert record["Log"][-1]["ExitCode"] == 1, record
    assert len(output.strip().splitlines()) == 1 and "cannot isolate code" in output and "bwrap" in output
    print(output)  # the operator's one line, shown with -s
