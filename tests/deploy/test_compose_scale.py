"""The scale deploy for real: build, `docker compose up` deploy/docker-compose.scale.yml as shipped (plus
tests/deploy/compose.scale.test.yml: the host's network, two replicas `bot` and `bot2`, local stand-ins for
PostgreSQL with pgvector, nginx and SearXNG), and drive it as Telegram would: POSTs with the secret header to
the proxy's webhook path, spread over both replicas, every update answered; a code turn through a sandbox
service on TCP; `down -v`.

Minutes of work and a Docker engine with Compose v2: it runs only with DEPLOY_TEST=1, which
scripts/test-deploy.sh sets (see deploy/README.md). The base images must be local or pullable; where they
cannot be pulled, scripts/local-base-images.sh builds them (docs/docker-on-test-hosts.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.deploy.test_compose_up import (
    HERE,
    PRINTED,
    PROGRAM,
    REPO,
    Stack,
    _answer_with_the_output,
    _free_port,
    write_test_env,
)
from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram

IMAGE = "telegram-assistant:scaletest"
TOKEN = "123456:SCALE-TEST-token"
SECRET = "scale-test-webhook-secret"
WEBHOOK_URL = "https://bot.example.test/tg-hook"
USERS = (111, 112, 113, 114)
FILES = (REPO / "deploy" / "docker-compose.scale.yml", HERE / "compose.scale.test.yml")
SERVICES = ("db", "sandbox1", "sandbox2", "bot", "bot2", "proxy")

pytestmark = [
    pytest.mark.slow,  # Docker
    pytest.mark.skipif(
        os.environ.get("DEPLOY_TEST") != "1", reason="the Docker deploy test runs with scripts/test-deploy.sh"
    ),
]


def _stack(project: str, env_file: Path, upstream_conf: Path) -> Stack:
    """A compose project of the scale file with the test override's variables set."""
    ports = {
        name: str(_free_port())
        for name in ("PG", "BOT", "BOT2", "APP", "APP2", "PROXY", "SANDBOX1", "SANDBOX2", "SEARXNG")
    }
    env = {
        **os.environ,
        # What a user puts in deploy/.env.
        "POSTGRES_PASSWORD": "scaletest0password",
        "CODE_SANDBOX_TOKEN": "scale-test-sandbox-token",
        "TELEGRAM_WEBHOOK_URL": WEBHOOK_URL,
        "TELEGRAM_WEBHOOK_SECRET": SECRET,
        # What the override needs.
        "DEPLOYTEST_IMAGE": IMAGE,
        "DEPLOYTEST_ENV_FILE": str(env_file),
        "DEPLOYTEST_UPSTREAM_CONF": str(upstream_conf),
        "DEPLOYTEST_SCALE_FILE": str(FILES[0]),
        "DEPLOYTEST_DIR": str(HERE),
        **{f"DEPLOYTEST_{name}_PORT": port for name, port in ports.items()},
    }
    return Stack(project, env, files=FILES)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Build the image and the stand-ins once; remove them at the end (the base images and cache stay)."""
    if shutil.which("docker") is None:
        pytest.fail("DEPLOY_TEST=1 but no docker client")
    built = tmp_path_factory.mktemp("build")
    (built / "empty.env").touch()
    (built / "upstream.conf").touch()
    _stack(f"ta-scaletest-build-{os.getpid()}", built / "empty.env", built / "upstream.conf").run("build")
    yield
    subprocess.run(
        ["docker", "image", "rm", *(f"{IMAGE}{s}" for s in ("", "-db", "-proxy", "-searxng"))],
        capture_output=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def stack(images: None, tmp_path: Path) -> Iterator[Stack]:
    """A compose project of this test, removed with its volumes afterwards."""
    env_file = tmp_path / "test.env"
    env_file.touch()  # written by the test once the fakes have their ports
    made = _stack(f"ta-scaletest-{os.getpid()}", env_file, tmp_path / "upstream.conf")
    # Where the shipped file names the service `bot` (Docker's DNS: every replica), both replicas by port.
    (tmp_path / "upstream.conf").write_text(
        "upstream bot_replicas {\n"
        f"    server 127.0.0.1:{made.env['DEPLOYTEST_BOT_PORT']};\n"
        f"    server 127.0.0.1:{made.env['DEPLOYTEST_BOT2_PORT']};\n"
        "}\n"
        "upstream app_replicas {\n"
        f"    server 127.0.0.1:{made.env['DEPLOYTEST_APP_PORT']};\n"
        f"    server 127.0.0.1:{made.env['DEPLOYTEST_APP2_PORT']};\n"
        "}\n"
    )
    try:
        yield made
    finally:
        # Shown by pytest only when the test failed: what each replica and the proxy said.
        logs = subprocess.run(
            made.argv("logs", "--no-color", "--timestamps", "bot", "bot2", "proxy"),
            env=made.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        print(logs.stdout[-60000:])
        made.down()


def _model(request: dict[str, Any]) -> Any:
    """The fake model, stateless (turns of four chats run at once on two replicas): a greeting is answered by
    name, "run the program" asks for `code`, and the sandbox's result is quoted back."""
    last = request["messages"][-1]
    if last.get("role") == "tool":
        return _answer_with_the_output(request)
    said = json.dumps(last.get("content"))
    if "run the program" in said:
        return tool_calls(call("code", {"action": "execute", "code": PROGRAM}))
    greeting = re.search(r"hello from (\d+)", said)
    return text(f"Hello, {greeting.group(1)}! END" if greeting else "ok")


async def _post(session: aiohttp.ClientSession, url: str, update: dict[str, Any], secret: str) -> int:
    """POST one update as Telegram does; the HTTP status the proxy answered."""
    headers = {"X-Telegram-Bot-Api-Secret-Token": secret}
    async with session.post(url, json=update, headers=headers) as response:
        return response.status


async def _listening(port: str, timeout: float = 120) -> None:
    """Wait until something accepts connections on 127.0.0.1:`port` (the host's network)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", int(port))
        except OSError:
            if loop.time() > deadline:
                raise AssertionError(f"nothing listens on port {port} after {timeout:.0f} s") from None
            await asyncio.sleep(0.2)
        else:
            writer.close()
            await writer.wait_closed()
            return


def _inspect(container: str) -> dict[str, Any]:
    """`docker inspect` of one container."""
    done = subprocess.run(
        ["docker", "inspect", container], capture_output=True, text=True, timeout=60, check=True
    )
    record: dict[str, Any] = json.loads(done.stdout)[0]
    return record


async def test_replicas_behind_the_proxy_answer_every_update(stack: Stack, tmp_path: Path) -> None:
    async with FakeTelegram(token=TOKEN) as tg, FakeLLM() as llm:
        llm.default = _model
        write_test_env(tmp_path / "test.env", tg, llm, token=TOKEN, users=USERS, key="sk-scale-test")
        started = time.monotonic()
        await stack.arun("up", "-d")
        for service in SERVICES:
            assert (await stack.wait_health(service, "healthy"))["Status"] == "healthy", service
        healthy = time.monotonic()
        # Every replica registered the same webhook with the secret, and serves: python-telegram-bot calls
        # setWebhook before its server listens, so the ports are what says a replica takes POSTs.
        hooks = await tg.wait_for(lambda: (c := tg.calls_to("setWebhook")) and len(c) >= 2 and c, timeout=90)
        assert {(c.params["url"], c.params["secret_token"]) for c in hooks} == {(WEBHOOK_URL, SECRET)}
        for port in (stack.env["DEPLOYTEST_BOT_PORT"], stack.env["DEPLOYTEST_BOT2_PORT"]):
            await _listening(port)

        proxy = f"http://127.0.0.1:{stack.env['DEPLOYTEST_PROXY_PORT']}/tg-hook"
        updates = []
        for user in USERS:
            tg.push_text(user, f"hello from {user}")
            updates.append(tg.updates.pop())  # delivered by the test through the proxy, not by getUpdates
        # One kept-alive connection: one nginx worker, whose round robin alternates between the replicas.
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
            statuses = [await _post(session, proxy, update, SECRET) for update in updates]
            assert statuses == [200] * len(USERS)

            def all_answered() -> bool:
                return all(f"Hello, {u}! END" in tg.sent_texts(u) for u in USERS)

            await tg.wait_for(all_answered, timeout=120, what="an answer in every chat")
            answered = time.monotonic()

            # Only Telegram, which knows the secret, gets in; only POSTs get past the proxy.
            forged = dict(updates[0], update_id=updates[-1]["update_id"] + 1)
            assert await _post(session, proxy, forged, "not-the-secret") == 403
            async with session.get(proxy) as response:
                assert response.status == 403
            # The app through the proxy: the page, and its API refusing a request without Telegram's data.
            app = f"http://127.0.0.1:{stack.env['DEPLOYTEST_PROXY_PORT']}"
            async with session.get(f"{app}/app/") as response:
                assert response.status == 200
                assert "default-src 'self'" in response.headers["Content-Security-Policy"]
            for path in ("/app/api/me", "/api/me"):
                async with session.get(app + path) as response:
                    assert response.status == 401 and (await response.json())["reason"] == "missing"

        # The proxy's log: each replica got updates, and all of them were accepted.
        lines = [
            line
            for line in (await stack.arun("logs", "--no-color", "proxy")).stdout.splitlines()
            if '"POST /tg-hook' in line
        ]
        for port in (stack.env["DEPLOYTEST_BOT_PORT"], stack.env["DEPLOYTEST_BOT2_PORT"]):
            accepted = [line for line in lines if f"upstream=127.0.0.1:{port} upstream_status=200" in line]
            assert len(accepted) == len(USERS) // 2, lines

        # A code turn: a replica -> a sandbox service on TCP with the token -> bwrap -> the answer.
        before = len(tg.sent_texts(USERS[0]))
        tg.push_text(USERS[0], "run the program")
        async with aiohttp.ClientSession() as session:
            assert await _post(session, proxy, tg.updates.pop(), SECRET) == 200

        def code_answer() -> str | None:
            return next((t for t in tg.sent_texts(USERS[0])[before:] if t.endswith("END")), None)

        answer: str = await tg.wait_for(code_answer, timeout=120, what="the code turn's answer")
        coded = time.monotonic()
        assert PRINTED in answer and "isolation: bwrap" in answer, answer

        # One replica stops (an upgrade, a crash): the proxy hands its share to the other, nothing is lost.
        await stack.arun("stop", "-t", "10", "bot2")
        again = USERS[:2]
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
            for user in again:
                tg.push_text(user, f"hello from {user}")
                assert await _post(session, proxy, tg.updates.pop(), SECRET) == 200

        def answered_twice() -> bool:
            return all(tg.sent_texts(u).count(f"Hello, {u}! END") == 2 for u in again)

        await tg.wait_for(answered_twice, timeout=60, what="the answers with one replica stopped")
        # Round robin sent one of the two to the stopped replica first: refused there, passed to the other.
        bot, bot2 = stack.env["DEPLOYTEST_BOT_PORT"], stack.env["DEPLOYTEST_BOT2_PORT"]
        proxy_log = (await stack.arun("logs", "--no-color", "proxy")).stdout
        failover = f"upstream=127.0.0.1:{bot2}, 127.0.0.1:{bot} upstream_status=502, 200"
        assert proxy_log.count(failover) == 1, proxy_log[-3000:]

        # The sandboxes as shipped: locked down, holding the token and nothing else of the bot's.
        for service in ("sandbox1", "sandbox2"):
            record = _inspect(await asyncio.to_thread(stack.container, service))
            host = record["HostConfig"]
            assert host["ReadonlyRootfs"] is True and host["CapDrop"] == ["ALL"], service
            assert record["Config"]["User"] == "10001:10001", service
            environment = "\n".join(record["Config"]["Env"])
            assert f"CODE_SANDBOX_TOKEN={stack.env['CODE_SANDBOX_TOKEN']}" in environment, service
            others = (TOKEN, "sk-scale-test", stack.env["POSTGRES_PASSWORD"], SECRET)
            assert not [secret for secret in others if secret in environment], service
        # Two replicas and their health checks (`doctor --quick`, which migrates too) all upgraded one empty
        # database at once, one at a time: PostgreSQL logged no failed statement (a race logs duplicate keys).
        database_log = (await stack.arun("logs", "--no-color", "db")).stdout
        assert "ERROR:" not in database_log, database_log[-4000:]
        # The replicas share the host's network, hostname and boot, each in a pid namespace of its own:
        # neither took the other, alive, for dead (its chats taken over mid-turn, its user told it was
        # restarted).
        for user in USERS:
            said = tg.sent_texts(user)
            assert not [t for t in said if t.startswith("I was restarted")], said
            assert said.count(f"Hello, {user}! END") == (2 if user in again else 1), said
        bots_log = (await stack.arun("logs", "--no-color", "bot", "bot2")).stdout
        wrong = [line for line in bots_log.splitlines() if "taking over" in line or "taken for dead" in line]
        assert not wrong, wrong
        print(
            f"up -> {len(SERVICES)} services healthy {healthy - started:.1f} s; "
            f"{len(USERS)} updates through the proxy answered {answered - healthy:.1f} s; "
            f"code turn {coded - answered:.1f} s"
        )
