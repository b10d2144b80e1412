"""The schedule runner at shutdown (ScheduleRunner.aclose): its wake-up is disarmed, nothing is armed again,
and a task's turn still running is cut like a crash would cut it, so the next start reports it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, running_bot
from tests.support.schedules import local_at


async def test_closing_the_runner_disarms_it_and_cuts_a_running_task(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("The news, summarised.", hold=asyncio.Event()))  # the task's turn streams until cut
    async with running_bot(tmp_path, tg, llm) as h:
        runner = h.app.bot_data.schedule_runner
        jobs = h.app.job_queue
        assert jobs is not None
        service = h.services.schedules.service
        made = service.create(
            user_id=OWNER,
            chat_id=OWNER,
            chat_type="private",
            text="Summarise the news",
            kind="task",
            at=local_at(1),
        )
        later = service.create(
            user_id=OWNER, chat_id=OWNER, chat_type="private", text="Call the dentist", at=local_at(3600)
        )
        h.services.schedules.wake()
        await llm.wait_for_requests(1)  # the task's turn runs
        # Armed again once the look that started the task is over (for the reminder in an hour).
        await tg.wait_for(lambda: jobs.get_jobs_by_name("schedule-tick"), what="the next wake-up armed")
        await runner.aclose()  # returns although the turn's stream is still held open: the turn was cut
        assert not jobs.get_jobs_by_name("schedule-tick")
        runner.wake()
        assert not jobs.get_jobs_by_name("schedule-tick")  # nothing is armed after the close
        (firing,) = service.store.firings_of(int(made["id"]))
        assert firing.status == "sending"  # of unknown outcome, as after a crash
        assert not any("The news" in t for t in tg.sent_texts(OWNER))
        assert service.store.firings_of(int(later["id"])) == []
    async with running_bot(tmp_path, tg, llm) as h:
        told = await h.final_text(OWNER, "I was restarted while running your scheduled task")
        assert f"#{made['id']}" in told and "did not run it again" in told
