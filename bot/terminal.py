"""`python -m bot chat`: the same turn loop in a terminal, for one local user."""

from __future__ import annotations

import asyncio
import sys

from bot.wiring import Services
from core_tools.agent import TurnInput
from core_tools.errors import LLMUnavailable
from core_tools.types import ChatType


class TerminalSink:
    """Prints the answer as it streams, and tool status lines."""

    def __init__(self) -> None:
        self.printed = 0

    async def text(self, partial: str) -> None:
        """Print what is new since the last call."""
        if len(partial) < self.printed:  # a new round started over
            sys.stdout.write("\n")
            self.printed = 0
        sys.stdout.write(partial[self.printed :])
        sys.stdout.flush()
        self.printed = len(partial)

    async def status(self, line: str) -> None:
        """Print a status line."""
        sys.stdout.write(f"\n[{line}]\n")
        sys.stdout.flush()
        self.printed = 0


async def chat_loop(services: Services, user_id: int) -> None:
    """Read lines from stdin until EOF or /quit; answer each."""
    print("Terminal chat. Type /newsession [name] for a new session, /quit (or Ctrl-D) to leave.")
    loop = asyncio.get_running_loop()
    while True:
        sys.stdout.write("\nyou> ")
        sys.stdout.flush()
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        text = line.strip()
        if not text:
            continue
        if text in ("/quit", "/exit"):
            break
        if text.startswith("/newsession"):
            name = text.removeprefix("/newsession").strip() or None
            result = await services.sessions.new_session(user_id, user_id, name)
            print(f"Started a new session: {result.new.name}.")
            continue
        sys.stdout.write("assistant> ")
        sink = TerminalSink()
        try:
            result_turn = await services.agent.run_turn(
                TurnInput(user_id, user_id, text, "you", chat_type=ChatType.PRIVATE), sink
            )
        except LLMUnavailable as exc:
            print(f"\n(no answer: {exc}; your message is saved)")
            continue
        except TimeoutError:
            print("\n(the turn took too long and was stopped)")
            continue
        if sink.printed == 0:
            sys.stdout.write(result_turn.text)
        sys.stdout.write("\n")
