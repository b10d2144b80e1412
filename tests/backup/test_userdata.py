"""An erase that really erases (issue 31 §3, §6, §12): after `forget_user` the user's words are in no byte
of the live database files nor of a backup taken afterwards; a group conversation's summary (other
members' words) is neither in one member's export nor kept after a member's erase; the user's approval rows
(theirs, and the ones naming them as who decided) go with them."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from core_tools.backup.take import BackupConfig, take_backup
from core_tools.backup.userdata import export_user, forget_user, scrub_files
from core_tools.memory.store import MemoryStore
from db.engine import make_engine, make_sessionmaker
from db.migrate import upgrade
from db.models import ChatSession, CodeExecution, LLMCall, MediaFile, Message, ToolCallLog, TurnEvent, User
from tests.backup.helpers import fill, store_file
from tests.support.embedders import TinyEmbedder
from tests.support.harness import FRIEND, OWNER

WORD = "quokkazebra"  # in nothing but the erased user's rows
GROUP = -100_777


async def fill_words(engine: Engine, media: Path, user_id: int) -> str:
    """The user's words everywhere a user has some: messages (one long enough for overflow pages), a session
    summary, memories (their keyword index and history), a file and its row, usage and tool rows, code runs;
    also a group session the friend started, where the user spoke, with a summary. The group session's id."""
    sm = make_sessionmaker(engine)
    sha = store_file(media, f"the file says {WORD}".encode())
    with sm.begin() as s:
        s.add(User(id=user_id, first_name="Ann"))
        s.flush()
        mine = ChatSession(user_id=user_id, chat_id=user_id, name="main", summary=f"We spoke of {WORD}.")
        group = ChatSession(
            user_id=FRIEND,
            chat_id=GROUP,
            chat_type="supergroup",
            name="group",
            summary=f"Ann told the group about {WORD}.",
        )
        s.add_all([mine, group])
        s.flush()
        for n in range(30):
            s.add(
                Message(
                    session_id=mine.id,
                    user_id=user_id,
                    chat_id=user_id,
                    role="user" if n % 2 == 0 else "assistant",
                    content=f"message {n}: {WORD} " + ("x" * 9000 if n == 7 else "and more"),
                )
            )
        s.add(Message(session_id=group.id, user_id=FRIEND, chat_id=GROUP, role="user", content="hi all"))
        s.add(Message(session_id=group.id, user_id=user_id, chat_id=GROUP, role="user", content=f"I {WORD}"))
        s.add(
            MediaFile(
                user_id=user_id,
                chat_id=user_id,
                kind="document",
                file_name=f"{WORD}.txt",
                size=20,
                sha256=sha,
                status="received",
            )
        )
        s.add(LLMCall(user_id=user_id, purpose="chat", model="m", error=f"refused {WORD}"))
        s.add(
            ToolCallLog(
                user_id=user_id,
                call_id="c1",
                tool="web_search",
                arguments=json.dumps({"q": WORD}),
                ok=True,
                result=f"found {WORD}",
                duration_ms=3,
            )
        )
        s.add(
            CodeExecution(
                user_id=user_id,
                session_id=mine.id,
                success=True,
                code=f"print('{WORD}')",
                stdout=WORD,
                isolation="bwrap",
                trigger_message=WORD,
            )
        )
        s.add(TurnEvent(user_id=user_id, session_id=mine.id, kind="note", detail=WORD))
        s.execute(
            text(
                "INSERT INTO approval_always (chat_id, tool, allowed_by, created_at) "
                "VALUES (:c, 'run_code', :u, CURRENT_TIMESTAMP)"
            ),
            {"c": GROUP, "u": user_id},
        )
        s.execute(
            text(
                "INSERT INTO approvals (chat_id, user_id, tool, summary, status, decided_by, created_at) "
                "VALUES (:c, :f, 'run_code', 'print(1)', 'approved', :u, CURRENT_TIMESTAMP)"
            ),
            {"c": GROUP, "f": FRIEND, "u": user_id},
        )
    store = MemoryStore(sm, engine, TinyEmbedder())
    await store.reembed()
    for n in range(5):
        await store.store(user_id, "long", f"User keeps a {WORD} number {n}")
    await store.store(user_id, "long", f"User keeps a {WORD} at home")
    with engine.connect() as conn:
        public = (
            conn.execute(
                text("SELECT public_id FROM memories WHERE user_id = :u ORDER BY id DESC"), {"u": user_id}
            )
            .scalars()
            .first()
        )
    assert await store.edit(user_id, str(public), f"User keeps two of {WORD} at home") is not None
    with sm.begin() as s:  # a long message that waited in the inbox: deleted (as a turn takes it) before
        s.execute(
            text(
                "INSERT INTO inbox (chat_id, user_id, chat_type, content, received_at) "
                "VALUES (:u, :u, 'private', :t, CURRENT_TIMESTAMP)"
            ),
            {"u": user_id, "t": f"long {WORD} " * 2000},
        )
    with sm.begin() as s:
        s.execute(text("DELETE FROM inbox WHERE user_id = :u"), {"u": user_id})
    return group.id


def raw_bytes(paths: list[Path]) -> bytes:
    return b"".join(p.read_bytes() for p in paths if p.is_file())


async def test_erased_words_are_in_no_byte_of_the_database_nor_of_a_later_backup(
    database_url: str, db_kind: str, tmp_path: Path
) -> None:
    engine = make_engine(database_url)
    media = tmp_path / "media"
    await fill(engine, media, FRIEND, messages=40)  # another user's rows around (pages stay in use)
    group = await fill_words(engine, media, OWNER)
    files = []
    if db_kind == "sqlite":
        db = Path(str(engine.url.database))
        files = [db, db.with_name(db.name + "-wal")]
        assert WORD.encode() in raw_bytes(files)  # the test can see it at all

    erased = forget_user(engine, media, OWNER)

    assert erased.scrubbed, "the erase reports the files as not scrubbed yet"
    assert erased.rows["messages"] == 31 and erased.rows["memories"] == 6
    if db_kind == "sqlite":
        assert WORD.encode() not in raw_bytes(files)
    else:  # the dead tuples left by the erase were vacuumed at once (README: what PostgreSQL keeps)
        with engine.connect() as conn:
            vacuumed = conn.execute(
                text("SELECT relname FROM pg_stat_user_tables WHERE last_vacuum IS NOT NULL")
            ).scalars()
            assert {"messages", "memories", "memory_history", "sessions"} <= set(vacuumed)
    backups = tmp_path / "backups"
    path, manifest = take_backup(BackupConfig(database_url, str(media), str(backups)))
    archive = raw_bytes([path.parent / p.name for p in manifest.parts])
    assert archive and WORD.encode() not in archive
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        assert "database.sqlite" in tar.getnames()
    with engine.connect() as conn:
        # The group's conversation stays the group's, without the summary that quoted the erased member.
        assert conn.execute(text("SELECT summary FROM sessions WHERE id = :g"), {"g": group}).one() == (None,)
        assert conn.execute(text("SELECT count(*) FROM approval_always")).scalar() == 0
        assert conn.execute(text("SELECT decided_by FROM approvals")).all() == [(None,)]
        assert (
            conn.execute(text("SELECT count(*) FROM messages WHERE chat_id = :g"), {"g": GROUP}).scalar() == 1
        )
    engine.dispose()


async def test_a_group_summary_is_not_in_a_members_export(database_url: str, tmp_path: Path) -> None:
    engine = make_engine(database_url)
    media = tmp_path / "media"
    await fill(engine, media, FRIEND)
    await fill_words(engine, media, OWNER)
    with engine.begin() as conn:  # the friend's own private summary is theirs
        conn.execute(text("UPDATE sessions SET summary = 'private notes' WHERE chat_type = 'private'"))
    done = export_user(engine, media, FRIEND, tmp_path / "friend.zip")
    assert done.tables["sessions"] == 1 + 1  # the group session they started, and their private one
    with zipfile.ZipFile(done.path) as z:
        everything = z.read("all_tables.json").decode()
    assert "Ann told the group" not in everything  # another member's words
    assert "private notes" in everything
    engine.dispose()


@pytest.mark.slow  # the checkpoint waits out the busy timeout on each of its tries
async def test_an_erase_while_another_connection_reads_says_not_scrubbed_and_a_later_scrub_does_it(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url)
    engine = make_engine(url)
    media = tmp_path / "media"
    await fill(engine, media, FRIEND)
    await fill_words(engine, media, OWNER)
    db = Path(str(engine.url.database))
    files = [db, db.with_name(db.name + "-wal")]
    reader = make_engine(url)
    raw = reader.raw_connection()
    cursor = raw.cursor()
    cursor.execute("BEGIN")
    cursor.execute("SELECT count(*) FROM messages").fetchall()  # a snapshot held open: the WAL stays
    erased = forget_user(engine, media, OWNER)
    assert not erased.scrubbed and erased.rows["messages"] == 31
    raw.rollback()
    raw.close()
    assert scrub_files(engine)
    assert WORD.encode() not in raw_bytes(files)
    reader.dispose()
    engine.dispose()
