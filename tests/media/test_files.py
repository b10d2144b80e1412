"""Files in: text extracted (PDF, DOCX, CSV, text), small ones inline as data, large ones read by pages."""

from __future__ import annotations

import json
from pathlib import Path

from db.models import MediaFile, Message
from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, rows, running_bot
from tests.support.media_files import make_docx, make_pdf, user_content


async def test_pdf_docx_csv_and_text_files_are_read(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    pdf = make_pdf(["Quarterly revenue grew by 12 percent.", "Costs stayed flat."])
    docx = make_docx("Meeting notes", ["We agreed to ship on Friday."])
    csv = b"region,sales\nnorth,10\nsouth,32\n"
    llm.script(text("PDF read."), text("DOCX read."), text("CSV read."), text("Code read."))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_document(OWNER, pdf, "report.pdf", "application/pdf", caption="summarise this")
        await h.final_text(OWNER, "PDF read.")
        content = user_content(llm.requests[0])
        assert content.startswith("summarise this")
        assert '"report.pdf", PDF' in content and "2 pages" in content
        assert "Quarterly revenue grew by 12 percent." in content and "Costs stayed flat." in content
        assert "not instructions" in content and "in/report.pdf" in content

        tg.push_document(
            OWNER,
            docx,
            "notes.docx",
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        )
        await h.final_text(OWNER, "DOCX read.")
        content = user_content(llm.requests[1])
        assert "headings: Meeting notes" in content and "We agreed to ship on Friday." in content

        tg.push_document(OWNER, csv, "sales.csv", "text/csv")
        await h.final_text(OWNER, "CSV read.")
        content = user_content(llm.requests[2])
        assert "2 data rows; columns: region, sales" in content and "south,32" in content

        tg.push_document(OWNER, b"def f(x):\n    return x < 3 and x > 1\n", "tool.py", "text/x-python")
        await h.final_text(OWNER, "Code read.")
        content = user_content(llm.requests[3])
        # Escaped so that file content can never close its block or pose as markup.
        assert "return x &lt; 3 and x &gt; 1" in content
        assert [(f["kind"], f["status"]) for f in rows(h, MediaFile)] == [("document", "extracted")] * 4
        assert all(m["status"] == "answered" for m in rows(h, Message) if m["role"] == "user")


async def test_a_large_file_is_stored_and_read_by_pages(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    body = "".join(f"line {i:04d} of the long log\n" for i in range(400))  # about 11,000 characters
    llm.script(
        tool_calls(call("read_file", {"file_id": 1, "offset": 2000})),
        text("The log ends well."),
    )
    async with running_bot(tmp_path, tg, llm, file_inline_chars=3000, file_page_chars=2000) as h:
        tg.push_document(OWNER, body.encode(), "server.log", "text/plain", caption="anything odd?")
        await h.final_text(OWNER, "The log ends well.")
        content = user_content(llm.requests[0])
        assert "line 0000" in content and "line 0399" not in content
        assert "read_file(file_id=1, offset=2000)" in content and f"{len(body)} characters" in content
        page = json.loads(llm.requests[1]["messages"][-1]["content"])
        assert page["offset"] == 2000 and page["text"] == body[2000:4000] and page["next_offset"] == 4000
        assert page["total_chars"] == len(body)


async def test_read_file_is_only_for_the_users_own_files(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    from tests.support.harness import FRIEND

    llm.script(text("Stored."), tool_calls(call("read_file", {"file_id": 1})), text("No access."))
    async with running_bot(tmp_path, tg, llm, file_inline_chars=500, file_page_chars=500) as h:
        tg.push_document(OWNER, b"secret " * 200, "mine.txt", "text/plain")
        await h.final_text(OWNER, "Stored.")
        tg.push_text(FRIEND, "read file 1")
        await h.final_text(FRIEND, "No access.")
        result = json.loads(llm.requests[2]["messages"][-1]["content"])
        assert "no readable file 1" in json.dumps(result) and "secret" not in json.dumps(result)


async def test_a_file_sent_in_private_is_not_readable_in_a_group(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    group = -100777
    secret = "the vault code is 5521. "
    llm.script(
        text("Stored."),
        # In the group, the model asks for the owner's private file and for an id that does not exist.
        tool_calls(
            call("read_file", {"file_id": 1}, id="private"), call("read_file", {"file_id": 7}, id="none")
        ),
        text("Nothing to read here."),
    )
    async with running_bot(
        tmp_path, tg, llm, allowed_chat_ids=str(group), file_inline_chars=500, file_page_chars=500
    ) as h:
        tg.push_document(OWNER, (secret * 60).encode(), "vault.txt", "text/plain")
        await h.final_text(OWNER, "Stored.")
        tg.push_text(OWNER, "@test_bot read file 1 for everyone", chat_id=group)
        await h.final_text(group, "Nothing to read here.")
        answers = {
            m["tool_call_id"]: m["content"] for m in llm.requests[2]["messages"] if m["role"] == "tool"
        }
        # Exactly the answer of an unknown id: the group learns nothing, not even that file 1 exists.
        assert answers["private"].replace("file 1", "file N") == answers["none"].replace("file 7", "file N")
        assert "no readable file 1" in answers["private"]
        for request in llm.requests[1:]:
            assert "vault code" not in json.dumps(request)
        assert not any("vault code" in t for t in tg.sent_texts(group))
        # Code runs' in/ files come from the chat's own session: the private file is not among the group's.
        conversations = h.services.conversations
        group_session = conversations.current_session(OWNER, group, chat_type="supergroup").id
        private_session = conversations.current_session(OWNER, OWNER).id
        assert h.services.media is not None
        assert h.services.media.sandbox_files(group_session) == {}
        assert list(h.services.media.sandbox_files(private_session)) == ["vault.txt"]
