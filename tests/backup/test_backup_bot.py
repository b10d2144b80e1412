"""Backups and users' data through the real bot: the backup job taken while turns are being written, its
parts through the fake Bot API's sendDocument and back into a restore, the drill telling the owner of a
damaged backup, /export's archive and /forget_me leaving nothing behind."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from sqlalchemy import BigInteger, Integer, MetaData, inspect, select
from telegram import Bot

from bot.adapter.outbox import TelegramOutbox
from bot.runtime.backup_jobs import SEND_TRIES, BackupJobs
from core_tools.backup.crypto import load_identities, new_identity
from core_tools.backup.restore import Target, restore
from db.engine import make_engine
from db.snapshot import managed_tables, sqlite_url
from tests.backup.helpers import counts, message_texts
from tests.support.fakes.openai_api import FakeLLM, last_user_text, text
from tests.support.fakes.telegram_api import FakeTelegram, UploadedFile
from tests.support.harness import OWNER, TOKEN, running_bot

BIG = 7_000_000_001  # a user id no counter or size of the tests reaches: found anywhere, it is this user's


def answers(llm: FakeLLM, n: int, delay: float = 0.0) -> None:
    """`n` replies, each naming the request it answers."""
    for _ in range(n):
        llm.script(lambda req: text("answer to " + str(req["messages"][-1]["content"])[-12:], delay=delay))


def documents(tg: FakeTelegram, chat_id: int) -> list[UploadedFile]:
    """The documents the bot uploaded to a chat, in order."""
    return [
        c.params["document"]
        for c in tg.calls_to("sendDocument")
        if c.ok and c.params.get("chat_id") == chat_id and isinstance(c.params.get("document"), UploadedFile)
    ]


@pytest.mark.slow  # a backup worker process while 20 turns run
async def test_backup_while_turns_are_written_goes_through_senddocument_and_restores(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    secret, public = new_identity()
    keyfile = tmp_path / "key.txt"
    keyfile.write_text(secret + "\n")
    answers(llm, 20, delay=0.3)
    async with running_bot(
        tmp_path,
        tg,
        llm,
        backup_dir=str(tmp_path / "backups"),
        backup_to_telegram=True,
        backup_part_mb=0.05,  # about 52 KB: a database of a few hundred KB makes many parts
        backup_age_recipients=public,
        memory_extract=False,
        message_merge_bursts=False,  # 20 turns, one a message
    ) as h:
        from tests.support.harness import FRIEND

        for n in range(10):  # 20 turns in two chats, being answered while the backup is taken
            tg.push_text(OWNER, f"owner message {n}")
            tg.push_text(FRIEND, f"friend message {n}")
        await llm.wait_for_requests(2)
        tg.fail_next("sendDocument", times=2, error="server_error")  # retried, then it goes through
        async with Bot(TOKEN, base_url=tg.base_url) as bot:
            jobs = BackupJobs(h.services, TelegramOutbox(bot, h.services.conversations.topics))
            manifest_path = await jobs.run()
        assert manifest_path is not None
        for n in range(10):
            await h.final_text(OWNER, f"owner message {n}"[-12:])
            await h.final_text(FRIEND, f"friend message {n}"[-12:])
    sent = documents(tg, OWNER)
    manifest = json.loads(sent[-1].data)
    assert [d.filename for d in sent[:-1]] == [p["name"] for p in manifest["parts"]] and len(sent) > 3
    assert sent[-1].filename == manifest_path.name and manifest["encrypted"] is True
    # The owner downloads the documents into one folder and restores them.
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    for doc in sent:
        (downloads / doc.filename).write_bytes(doc.data)
    lines: list[str] = []
    restore(downloads, Target.data_dir(tmp_path / "restored"), load_identities(keyfile), say=lines.append)
    copy = make_engine(sqlite_url(tmp_path / "restored" / "assistant.db"))
    with copy.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
        assert conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall() == []
    assert counts(copy) == manifest["tables"]
    restored = message_texts(copy)
    copy.dispose()
    assert "owner message 0" in restored  # the first turns were stored before the snapshot
    # A consistent database: the bot starts on it and goes on with the conversation it holds. Messages that
    # were still waiting at the snapshot are answered too, in either chat and in any order, so the answer
    # depends on what is asked, not on which request comes first.
    llm.default = lambda req: text("welcome back" if last_user_text(req) == "still there?" else "answer")
    async with running_bot(
        tmp_path / "restored-run",
        tg,
        llm,
        database_url=sqlite_url(tmp_path / "restored" / "assistant.db"),
        message_merge_bursts=False,
    ) as h:
        tg.push_text(OWNER, "still there?")
        await h.final_text(OWNER, "welcome back")
    asked = next(r for r in llm.requests if last_user_text(r) == "still there?")
    users = [m["content"] for m in asked["messages"] if m["role"] == "user"]
    assert users[0].startswith("owner message 0") and "friend message 0" not in users


async def test_a_failed_upload_is_reported_and_a_damaged_backup_fails_the_drill(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(
        tmp_path,
        tg,
        llm,
        backup_dir=str(tmp_path / "backups"),
        backup_to_telegram=True,
        backup_part_mb=0.05,
        backup_schedule="30 3 * * *",
    ) as h:
        tg.fail_next("sendDocument", times=20, error="server_error")
        async with Bot(TOKEN, base_url=tg.base_url) as bot:
            jobs = BackupJobs(h.services, TelegramOutbox(bot, h.services.conversations.topics))
            jobs.backoff_s = 0.01  # the retries' first wait, shortened for the test
            path = await jobs.run()
            assert path is not None
            texts = tg.sent_texts(OWNER)
            assert any("not encrypted" in t for t in texts)  # told once that backups are plain
            assert any(
                f"Backup {path.parent.name} could not be sent" in t and "kept on the server" in t
                for t in texts
            )
            assert len(tg.calls_to("sendDocument")) == SEND_TRIES  # retried, then given up
            assert not any("drill failed" in t for t in texts)  # the first drill ran on a good backup
            # A part damaged on disk: the next drill finds it and tells the owner.
            manifest = json.loads(path.read_text())
            part = path.parent / manifest["parts"][1]["name"]
            good = part.read_bytes()
            part.write_bytes(bytes([good[0] ^ 0xFF]) + good[1:])
            assert await jobs.drill_latest() is False
        told = tg.sent_texts(OWNER)[-1]
        assert "The weekly restore drill failed" in told and "part 2" in told and "corrupted" in told
        assert sum("not encrypted" in t for t in tg.sent_texts(OWNER)) == 1


def test_the_schedule_is_due_once_its_time_has_passed(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from tests.support.harness import make_settings

    class Conversations:
        def user_timezone(self, user_id: int) -> str:
            return "Asia/Tokyo"

    class Services:  # what BackupJobs reads of the services
        settings = make_settings(
            tmp_path, None, FakeLLM(), backup_schedule="30 3 * * *", backup_dir=str(tmp_path)
        )
        conversations = Conversations()

    jobs = BackupJobs(Services(), TelegramOutbox(Bot("1:x"), None))  # type: ignore[arg-type]
    jobs.started = datetime(2026, 1, 1, 18, 0, tzinfo=UTC)  # 03:00 on Jan 2 in Tokyo
    assert not jobs.due(jobs.started + timedelta(minutes=29))
    assert jobs.due(jobs.started + timedelta(minutes=30))  # 03:30 in the owner's zone


async def test_export_sends_one_archive_of_everything_about_the_user(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("Noted, a beagle."), text("Got your file."))
    async with running_bot(tmp_path, tg, llm, memory_extract=False) as h:
        tg.push_text(OWNER, "my dog is a beagle")
        await h.final_text(OWNER, "Noted, a beagle.")
        await h.services.memory.store(OWNER, "long", "Has a beagle named Max")
        tg.push_document(OWNER, b"col,a\n1,2\n", "table.csv", "text/csv")
        await h.final_text(OWNER, "Got your file.")
        tg.push_text(OWNER, "/export")
        await tg.wait_for(lambda: documents(tg, OWNER), what="the export archive")
    archive = documents(tg, OWNER)[0]
    assert archive.filename.startswith("my-data-") and archive.filename.endswith(".zip")
    with zipfile.ZipFile(io.BytesIO(archive.data)) as z:
        names = set(z.namelist())
        assert {
            "README.txt",
            "conversations.md",
            "conversations.json",
            "memories.json",
            "schedules.json",
            "usage.json",
            "code_runs.json",
            "all_tables.json",
            "files/files.json",
        } <= names
        assert "my dog is a beagle" in z.read("conversations.md").decode()
        assert "Noted, a beagle." in z.read("conversations.md").decode()
        assert "Has a beagle named Max" in z.read("memories.json").decode()
        assert any(n.endswith("-table.csv") and z.read(n) == b"col,a\n1,2\n" for n in names)
        usage = json.loads(z.read("usage.json"))
        assert usage["llm_calls"] and all(c["user_id"] == OWNER for c in usage["llm_calls"])
        assert "FRIEND" not in z.read("all_tables.json").decode()


async def test_export_and_forget_me_are_answered_only_in_private(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    group = -1001234
    async with running_bot(tmp_path, tg, llm, allowed_chat_ids=str(group)):
        for told, command in enumerate(("/export", "/forget_me"), start=1):
            tg.push_text(OWNER, command, chat_id=group)

            def answered(told: int = told) -> bool:
                return sum("private chat with me" in t for t in tg.sent_texts(group)) == told

            await tg.wait_for(answered, what=f"the answer to {command} in the group")
    # Nothing about the user's own data went to the group: no archive, no confirmation button.
    assert not documents(tg, group)
    assert not any(
        c.params.get("reply_markup") for c in tg.calls_to("sendMessage") if c.params.get("chat_id") == group
    )


def rows_naming(url: str, user_id: int) -> dict[str, int]:
    """Every table (and column) of the database with an integer equal to `user_id`, and how many rows."""
    engine = make_engine(url)
    found: dict[str, int] = {}
    with engine.connect() as conn:
        meta = MetaData()
        meta.reflect(conn, only=managed_tables(conn))
        for table in meta.tables.values():
            for column in table.c:
                # An int4 column of PostgreSQL cannot hold the id at all; SQLite's integers can.
                wide = BigInteger if conn.dialect.name == "postgresql" else Integer | BigInteger
                if isinstance(column.type, wide):
                    n = len(conn.execute(select(column).where(column == user_id)).all())
                    if n:
                        found[f"{table.name}.{column.name}"] = n
        assert inspect(conn).get_table_names()
    engine.dispose()
    return found


async def test_forget_me_leaves_no_row_and_no_file(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    shared = b"the same file, sent by both"
    llm.script(
        text("hello big"), text("file noted"), text("file noted"), text("own noted"), text("hello owner")
    )
    async with running_bot(tmp_path, tg, llm, allowed_user_ids=f"{OWNER},{BIG}", memory_extract=False) as h:
        tg.push_text(BIG, "hi, I am big")
        await h.final_text(BIG, "hello big")
        await h.services.memory.store(BIG, "long", "Big likes tea")
        tg.push_document(BIG, shared, "shared.txt", "text/plain")
        await h.final_text(BIG, "file noted")
        tg.push_document(OWNER, shared, "shared.txt", "text/plain")
        await h.final_text(OWNER, "file noted")
        tg.push_document(BIG, b"only big's", "own.txt", "text/plain")
        await h.final_text(BIG, "own noted")
        tg.push_text(OWNER, "hello")
        await h.final_text(OWNER, "hello owner")
        url = h.settings.database_url
        media = Path(h.settings.media_dir)
        assert rows_naming(url, BIG)
        files_before = {p.name for p in media.rglob("*") if p.is_file()}
        tg.push_text(BIG, "/forget_me")
        await h.final_text(BIG, "cannot be undone")
        tg.push_callback(OWNER, f"forget:yes:{BIG}", chat_id=BIG)  # someone else's press does nothing
        await tg.wait_for(lambda: tg.calls_to("answerCallbackQuery") or None, what="the refusal")
        tg.push_callback(BIG, f"forget:yes:{BIG}")
        done = await h.final_text(BIG, "Done. I deleted everything")
        assert "messages" in done and "memories" in done and "stored file(s) from disk" in done
    assert rows_naming(url, BIG) == {}
    files_after = {p.name for p in media.rglob("*") if p.is_file()}
    import hashlib

    own, both = hashlib.sha256(b"only big's").hexdigest(), hashlib.sha256(shared).hexdigest()
    assert own in files_before and own not in files_after and f"{own}.txt" not in files_after
    assert both in files_after  # the owner sent it too: it stays theirs
    engine = make_engine(url)
    assert "hello" in message_texts(engine)  # the owner's conversation is untouched
    engine.dispose()
