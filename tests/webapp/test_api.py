"""The app's JSON API over real HTTP, served by the real bot (tests/support/harness.py) with launch data
signed here.

Every change made through the API is checked where the chat sees it (/memory, /reminders): one service.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from bot.webapp.server import MAX_BODY
from db.media import NewMediaFile
from db.models import CodeExecution
from db.usage import LLMCallRecord
from tests.support.databases import both_databases
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, STRANGER, Harness, running_bot
from tests.webapp.client import DAY, AppClient, forged, init_data

db_kind = both_databases()  # SQLite and PostgreSQL: the memory list, the usage days and the runs are SQL
pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("bot_database"),
]  # bot processes, on the test's database

APP = {"webapp_listen": "127.0.0.1:0"}


async def _memory(h: Harness, user: int, content: str, **kwargs: object) -> str:
    stored = await h.services.memory.store(user, "long", content, dedupe=False, **kwargs)  # type: ignore[arg-type]
    return str(stored["memory"]["id"])


async def test_only_telegram_signed_fresh_data_of_an_allowed_user_gets_in(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, **APP) as h:
        await _memory(h, OWNER, "Owner's secret plan")
        cases = {
            "missing": None,
            "invalid": forged(OWNER),
            "expired": init_data(OWNER, age_s=DAY + 60),
            "not_allowed": init_data(STRANGER),
        }
        for reason, data in cases.items():
            async with AppClient(h.app_url, data) as client:
                for path in ("/api/me", "/api/memories", "/app/api/memories"):
                    status, body = await client.call("GET", path)
                    assert status == 401, (reason, path, status)
                    assert body["reason"] == reason and "secret plan" not in str(body)
        # A signature by another bot's token is as good as none.
        async with AppClient(h.app_url, init_data(OWNER, token="999:OTHER-TOKEN-xyz")) as client:
            assert (await client.call("GET", "/api/me"))[0] == 401
        async with AppClient(h.app_url, init_data(OWNER, age_s=DAY - 60)) as client:
            me = await client.ok("GET", "/api/me")
            assert me["user"]["id"] == OWNER and me["owner"] is True
            listing = await client.ok("GET", "/api/memories")
            assert [m["content"] for m in listing["memories"]] == ["Owner's secret plan"]
        async with AppClient(h.app_url, init_data(FRIEND)) as client:
            me = await client.ok("GET", "/api/me")
            assert me["owner"] is False
            assert (await client.ok("GET", "/api/memories"))["memories"] == []


async def test_an_edit_in_the_app_is_what_memory_shows_and_undo_brings_the_old_text_back(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, **APP) as h:
        memory_id = await _memory(h, OWNER, "User's favourite colour is blue")
        async with AppClient(h.app_url, init_data(OWNER)) as client:
            edited = await client.ok(
                "PATCH", f"/api/memories/{memory_id}", {"content": "Favourite colour: green"}
            )
            assert edited["memory"]["content"] == "Favourite colour: green"
            listing = await h.command(OWNER, "/memory", "Long-term:")
            assert "Favourite colour: green" in listing and "blue" not in listing
            history = await client.ok("GET", f"/api/memories/{memory_id}/history")
            last = history["changes"][0]
            assert (last["action"], last["actor"], last["old_text"]) == (
                "update",
                "user",
                "User's favourite colour is blue",
            )
            chat_history = await h.command(OWNER, f"/memory history {memory_id}", "Changes of")
            assert "update by user" in chat_history and "after: Favourite colour: green" in chat_history

            undone = await client.ok("POST", f"/api/memories/{memory_id}/undo")
            assert undone["undone"]["action"] == "update"
            listing = await h.command(OWNER, "/memory", "Long-term:")
            assert "User's favourite colour is blue" in listing and "green" not in listing

            # Forget, then undo: the memory is back with its id, in the chat too.
            forgotten = await client.ok("DELETE", f"/api/memories/{memory_id}")
            assert forgotten["forgotten"]["id"] == memory_id
            assert await h.command(OWNER, "/memory", "no memories") == "I have no memories about you yet."
            await client.ok("POST", f"/api/memories/{memory_id}/undo")
            listing = await h.command(OWNER, "/memory", "Long-term:")
            assert f"id {memory_id}" in listing

            # Bad bodies lose nothing and say what is wrong.
            for body in ({"content": ""}, {"content": "x" * 2001}, {"text": "no content"}, ["a list"]):
                status, answer = await client.call("PATCH", f"/api/memories/{memory_id}", body)
                assert status == 400 and answer["error"], body
            status, _ = await client.call("PATCH", f"/api/memories/{memory_id}", data=b"{not json")
            assert status == 400
            assert (await client.ok("GET", "/api/memories"))["memories"][0]["content"] == (
                "User's favourite colour is blue"
            )


async def test_another_users_ids_answer_404_and_change_nothing(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, **APP) as h:
        theirs = await _memory(h, FRIEND, "Friend's private note")
        mine = await _memory(h, OWNER, "Owner's note")
        service = h.services.schedules.service
        their_schedule = service.create(
            user_id=FRIEND,
            chat_id=FRIEND,
            chat_type="private",
            text="Friend's reminder",
            at="2031-01-01T09:00",
        )["id"]
        run_id = h.services.code.executions.record(
            CodeExecution(code="print('friend')", success=True, user_id=FRIEND, isolation="bwrap")
        )
        async with AppClient(h.app_url, init_data(OWNER)) as client:
            for method, path, body in [
                ("PATCH", f"/api/memories/{theirs}", {"content": "hijacked"}),
                ("DELETE", f"/api/memories/{theirs}", None),
                ("GET", f"/api/memories/{theirs}/history", None),
                ("POST", f"/api/memories/{theirs}/undo", None),
                ("POST", f"/api/schedules/{their_schedule}/pause", None),
                ("POST", f"/api/schedules/{their_schedule}/cancel", None),
                ("GET", f"/api/code_runs/{run_id}", None),
            ]:
                status, _ = await client.call(method, path, body)
                assert status == 404, (method, path, status)
            # An id that does not exist at all answers exactly the same.
            status, unknown = await client.call("PATCH", f"/api/memories/{mine[:-4]}beef", {"content": "x"})
            assert status == 404
            status, known = await client.call("PATCH", f"/api/memories/{theirs}", {"content": "x"})
            assert (status, known) == (404, unknown)
            everything = [
                await client.ok("GET", "/api/memories"),
                await client.ok("GET", "/api/memories?q=private%20note"),
                await client.ok("GET", "/api/schedules"),
                await client.ok("GET", "/api/code_runs"),
                await client.ok("GET", "/api/files"),
            ]
            assert "Friend" not in str(everything) and "friend" not in str(everything)
        their_memories = await h.services.memory.list_memories(FRIEND)
        assert [m["content"] for m in their_memories] == ["Friend's private note"]
        assert [s["status"] for s in service.list_for(FRIEND)] == ["active"]


async def test_a_large_body_is_refused_before_it_is_read(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, **APP) as h:
        memory_id = await _memory(h, OWNER, "Unchanged")
        webapp = h.webapp
        assert webapp is not None
        auth = init_data(OWNER)
        # 10 MB announced; only the headers and the first 64 KB are sent: the answer comes all the same.
        reader, writer = await asyncio.open_connection("127.0.0.1", webapp.port)
        size = 10 * 1024 * 1024
        writer.write(
            (
                f"PATCH /api/memories/{memory_id} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: tma {auth}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
            ).encode()
            + b'{"content": "'
            + b"x" * 65536
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
        assert head.startswith(b"HTTP/1.1 413"), head
        assert b"Connection: close" in head
        writer.close()
        # A chunked body (no length announced) is cut while reading.
        async with AppClient(h.app_url, auth) as client:

            async def chunks():  # type: ignore[no-untyped-def]
                yield b'{"content": "'
                for _ in range(8):
                    yield b"y" * 4096
                yield b'"}'

            status, _ = await client.call("PATCH", f"/api/memories/{memory_id}", data=chunks())
            assert status == 413
            # Just under the bound is an ordinary request (a memory's own limit then applies).
            status, answer = await client.call(
                "PATCH", f"/api/memories/{memory_id}", {"content": "z" * (MAX_BODY - 100)}
            )
            assert status == 400 and "2000" in answer["error"]
            assert (await client.ok("GET", "/api/memories"))["memories"][0]["content"] == "Unchanged"


async def test_sixty_requests_a_minute_then_429(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    async with running_bot(tmp_path, tg, llm, **APP) as h:
        webapp = h.webapp
        assert webapp is not None
        now = [1000.0]
        webapp.limiter.clock = lambda: now[0]  # time stands still: only the count decides
        async with (
            AppClient(h.app_url, init_data(OWNER)) as owner,
            AppClient(h.app_url, init_data(FRIEND)) as friend,
        ):
            for _ in range(60):
                assert (await owner.call("GET", "/api/me"))[0] == 200
            async with owner.session.get(h.app_url + "api/me") as resp:
                assert resp.status == 429
                assert resp.headers["Retry-After"] == "60"
                assert (await resp.json())["retry_after"] == 60
            # Each user has a limit of their own.
            assert (await friend.call("GET", "/api/me"))[0] == 200
            now[0] += 30
            assert (await owner.call("GET", "/api/me"))[0] == 429
            now[0] += 31  # the first requests have left the window
            assert (await owner.call("GET", "/api/me"))[0] == 200


async def test_pause_resume_and_cancel_a_schedule_as_reminders_sees_it(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, **APP) as h:
        service = h.services.schedules.service
        sid = service.create(
            user_id=OWNER,
            chat_id=OWNER,
            chat_type="private",
            text="Water the plants",
            at="2031-05-01T08:00",
            repeat="FREQ=WEEKLY",
        )["id"]
        async with AppClient(h.app_url, init_data(OWNER)) as client:
            listing = await client.ok("GET", "/api/schedules")
            item = listing["schedules"][0]
            assert (item["text"], item["status"], item["actions"]) == (
                "Water the plants",
                "active",
                ["pause", "cancel"],
            )
            assert item["next"][0] == "Thu 01 May 2031 08:00" and listing["timezone"] == "UTC"
            assert item["spend_month_usd"] is None

            paused = await client.ok("POST", f"/api/schedules/{sid}/pause")
            assert paused["schedule"]["status"] == "paused"
            assert paused["schedule"]["paused_why"] == "you paused it"
            shown = await h.command(OWNER, "/reminders", "Water the plants")
            assert "paused (you paused it)" in shown
            status, answer = await client.call("POST", f"/api/schedules/{sid}/pause")
            assert status == 409 and "not active" in answer["error"]

            resumed = await client.ok("POST", f"/api/schedules/{sid}/resume")
            assert resumed["schedule"]["status"] == "active"
            assert "paused" not in await h.command(OWNER, "/reminders", "Water the plants")

            cancelled = await client.ok("POST", f"/api/schedules/{sid}/cancel")
            assert cancelled["schedule"]["status"] == "cancelled"
            assert (await client.ok("GET", "/api/schedules"))["schedules"] == []
            await h.command(OWNER, "/reminders", "You have no reminders")
            for path in (
                f"/api/schedules/{sid}/explode",
                "/api/schedules/x1/pause",
                "/api/schedules/²/pause",
            ):
                assert (await client.call("POST", path))[0] == 404
            # Odd numbers in the query get a 400 that says what to give, never a server error.
            for path in ("/api/code_runs?limit=³", "/api/usage?days=٣", "/api/memories?offset=-1"):
                status, answer = await client.call("GET", path)
                assert status == 400 and "whole number" in answer["error"], path


async def test_a_tasks_spend_this_month_is_shown_as_reminders_shows_it(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    prices = '{"fake-model": [1.0, 2.0]}'
    async with running_bot(tmp_path, tg, llm, llm_prices=prices, **APP) as h:
        sid = h.services.schedules.service.create(
            user_id=OWNER,
            chat_id=OWNER,
            chat_type="private",
            text="Summarise the news",
            at="2031-05-01T08:00",
            repeat="FREQ=DAILY",
            kind="task",
        )["id"]
        h.services.usage.record_llm_call(
            LLMCallRecord(
                user_id=OWNER,
                session_id=None,
                purpose="chat",
                model="fake-model",
                prompt_tokens=100_000,
                completion_tokens=100_000,
                schedule_id=sid,
            )
        )
        async with AppClient(h.app_url, init_data(OWNER)) as client:
            [item] = (await client.ok("GET", "/api/schedules"))["schedules"]
        assert abs(item["spend_month_usd"] - 0.3) < 1e-9  # 0.1M tokens in at $1/M, 0.1M out at $2/M
        listing = await h.command(OWNER, "/reminders", "Summarise the news")
        assert "$0.3" in listing


async def test_guest_and_inline_turns_are_marked_in_usage(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, **APP) as h:
        for purpose, tokens in (("chat", 100), ("guest", 300), ("guest", 200), ("inline", 50)):
            h.services.usage.record_llm_call(
                LLMCallRecord(
                    user_id=OWNER,
                    session_id=None,
                    purpose=purpose,
                    model="fake-model",
                    prompt_tokens=tokens,
                    completion_tokens=0,
                )
            )
        async with AppClient(h.app_url, init_data(OWNER)) as client:
            usage = await client.ok("GET", "/api/usage?days=30")
        marked = [(o["purpose"], o["calls"], o["tokens"]) for o in usage["other_chats"]]
        assert marked == [("guest", 2, 500), ("inline", 1, 50)]
        assert (
            "guest" in usage["other_chats"][0]["label"] and "other chats" in usage["other_chats"][1]["label"]
        )
        assert {line["purpose"] for line in usage["lines"]} == {"chat", "guest", "inline"}


async def test_usage_by_day_with_caps_and_the_owners_view_of_everyone(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    prices = '{"fake-model": [1.0, 2.0]}'
    async with running_bot(tmp_path, tg, llm, llm_prices=prices, budget_daily_usd=1.0, **APP) as h:
        for user, tokens in ((OWNER, 1000), (FRIEND, 500_000)):
            h.services.usage.record_llm_call(
                LLMCallRecord(
                    user_id=user,
                    session_id=None,
                    purpose="chat",
                    model="fake-model",
                    prompt_tokens=tokens,
                    completion_tokens=tokens,
                    duration_ms=5,
                )
            )
        async with AppClient(h.app_url, init_data(FRIEND)) as friend:
            usage = await friend.ok("GET", "/api/usage?days=30")
            assert len(usage["days"]) == 30 and "everyone" not in usage
            [line] = usage["lines"]
            assert (line["day"], line["purpose"], line["tokens"]) == (29, "chat", 1_000_000)
            assert abs(line["cost"] - 1.5) < 1e-9
            [cap] = usage["caps"]
            assert (cap["period"], cap["kind"], cap["limit"], cap["left"]) == ("daily", "cost", 1.0, 0.0)
            assert (await friend.call("GET", "/api/usage?days=0"))[0] == 400
        async with AppClient(h.app_url, init_data(OWNER)) as owner:
            usage = await owner.ok("GET", "/api/usage")
            assert [line["tokens"] for line in usage["lines"]] == [2000]
            users = {u["user_id"]: u for u in usage["everyone"]["users"]}
            assert users[FRIEND]["tokens"] == 1_000_000 and users[FRIEND]["reached"]["kind"] == "cost"
            assert users[OWNER]["caps"] == [
                {"period": "daily", "kind": "cost", "limit": 1.0, "source": "default"}
            ]


async def test_code_runs_and_files_with_a_hostile_file_name(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, **APP) as h:
        executions = h.services.code.executions
        ok_run = executions.record(
            CodeExecution(
                code="print(6 * 7)",
                stdout="42\n",
                success=True,
                exit_code=0,
                duration_ms=120,
                user_id=OWNER,
                isolation="bwrap",
                files_out=[{"name": "chart.png", "size": 2048}],
            )
        )
        executions.record(
            CodeExecution(
                code="1/0",
                stderr="ZeroDivisionError",
                success=False,
                exit_code=1,
                duration_ms=80,
                error_category="runtime_error",
                user_id=OWNER,
                isolation="bwrap",
            )
        )
        assert h.services.media is not None
        name = "../../etc/passwd <b>x</b>.txt"
        h.services.media.rows.add(
            NewMediaFile(
                user_id=OWNER,
                chat_id=OWNER,
                kind="document",
                file_name=name,
                mime_type="text/plain",
                status="extracted",
                size=12,
            )
        )
        async with AppClient(h.app_url, init_data(OWNER)) as client:
            runs = (await client.ok("GET", "/api/code_runs?limit=10"))["runs"]
            assert [r["status"] for r in runs] == ["failed", "ok"]
            assert runs[0]["error_category"] == "runtime_error" and runs[1]["duration_ms"] == 120
            detail = (await client.ok("GET", f"/api/code_runs/{ok_run}"))["run"]
            assert (detail["code"], detail["stdout"]) == ("print(6 * 7)", "42\n")
            assert detail["files_out"] == [{"name": "chart.png", "size": 2048}]
            files = (await client.ok("GET", "/api/files"))["files"]
            assert [f["name"] for f in files] == [name]
            # The page's assets are only the files that exist: a path that climbs out finds nothing.
            for path in (
                "/assets/../webapp/server.py",
                "/assets/%2e%2e/%2e%2e/settings.py",
                "/assets/nope.js",
            ):
                status, _ = await client.call("GET", path)
                assert status == 404, path


async def test_the_page_headers_and_where_it_is_served(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, **APP) as h, AppClient(h.app_url, init_data(OWNER)) as client:
        for path in ("/", "/app/", "/assets/app.js", "/api/me", "/app/api/me"):
            async with client.session.get(
                h.app_url.rstrip("/") + path, headers={"Origin": "https://evil.example"}
            ) as resp:
                assert resp.status == 200, path
                csp = resp.headers["Content-Security-Policy"]
                assert "default-src 'self'" in csp and "script-src 'self'" in csp
                assert "unsafe-inline" not in csp and "https://web.telegram.org" in csp
                assert resp.headers["X-Content-Type-Options"] == "nosniff"
                assert not [k for k in resp.headers if k.lower().startswith("access-control-")]
        async with client.session.get(h.app_url + "app", allow_redirects=False) as resp:
            assert resp.status == 301 and resp.headers["Location"] == "/app/"
        async with client.session.get(h.app_url + "assets/app.js") as resp:
            assert resp.content_type == "text/javascript"
            etag = resp.headers["ETag"]
        async with client.session.get(h.app_url + "assets/app.js", headers={"If-None-Match": etag}) as resp:
            assert resp.status == 304
        page = await (await client.session.get(h.app_url)).text()
        assert "<script>" not in page and not re.search(r"(src|href)=\"(https?:)?//", page)


async def test_app_command_and_menu_button_open_the_app(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    url = "https://bot.example.org/app/"
    async with running_bot(tmp_path, tg, llm, webapp_url=url, **APP) as h:
        assert tg.menu_button_for(OWNER) == {"type": "web_app", "text": "App", "web_app": {"url": url}}
        await h.command(OWNER, "/app", "Your memories")
        markup = tg.last_message(OWNER)["reply_markup"]
        assert markup["inline_keyboard"][0][0]["web_app"] == {"url": url}
        assert "app" in tg.commands_for(OWNER, OWNER)


async def test_without_webapp_settings_nothing_listens_and_app_says_so(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        assert h.webapp is None
        assert tg.menu_button_for(OWNER) == {"type": "default"}
        await h.command(OWNER, "/app", "The app is not set up")
