"""The terminal's output and input: an answer streams after its prefix, a notice gets lines of its own, and
lines are read from stdin in a thread of their own."""

from __future__ import annotations

import codecs
import os
import sys
from collections.abc import Callable
from typing import TextIO

PROMPT = "you> "
ANSWER = "assistant> "


class Console:
    """The terminal's output. An answer streams after its prefix; a notice (a reminder, a saved file, a
    status line) gets lines of its own, after which the prompt or the answer's prefix is shown again."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.mode = ""  # "prompt" while waiting for input, "answer" while one streams
        self.at_line_start = True
        self.answered = False  # some of the current answer was written
        self.asked_in = ""  # the mode a question interrupted

    def _write(self, text: str) -> None:
        if text:
            self.stream.write(text)
            self.stream.flush()  # a pipe is block-buffered: every piece must show at once
            self.at_line_start = text.endswith("\n")

    def _new_line(self) -> None:
        if not self.at_line_start:
            self._write("\n")

    def prompt(self) -> None:
        """Ask for the next line."""
        self._new_line()
        self._write(PROMPT)
        self.mode = "prompt"

    def input_read(self, echoed: bool) -> None:
        """A line was read (a terminal echoed its newline; a pipe did not)."""
        self.at_line_start = echoed
        self.mode = ""

    def line(self, text: str) -> None:
        """A reply of its own (a command's answer)."""
        self._new_line()
        self._write(text + "\n")

    def answer_start(self) -> None:
        """An answer begins."""
        self._new_line()
        self._write(ANSWER)
        self.mode = "answer"
        self.answered = False

    def answer(self, text: str) -> None:
        """More of the answer."""
        self._write(text)
        self.answered = self.answered or bool(text)

    def answer_restart(self) -> None:
        """The answer starts over (a new round of the turn)."""
        self._write("\n")

    def answer_end(self, note: str | None = None) -> None:
        """The answer is over; `note` says how it ended, when it matters."""
        if note:
            self._write(f"\n\n{note}" if self.answered else note)
        self._write("\n")
        self.mode = ""

    def question(self, text: str) -> None:
        """A question the next line typed answers (a tool call's approval); no newline after it."""
        self._new_line()
        self._write(text)
        if self.mode != "question":
            self.asked_in = self.mode
        self.mode = "question"

    def decided(self, text: str) -> None:
        """The question is answered (or ended): say how, and go on where it was asked."""
        if self.mode != "question":
            self.asked_in = self.mode
        self._new_line()
        self._write(text + "\n")
        self.mode = self.asked_in
        if self.mode == "answer":
            self._write(ANSWER)

    def notice(self, text: str) -> None:
        """Something that arrived on its own, on lines of its own; then the prompt or prefix again."""
        self._new_line()
        self._write(text + "\n")
        if self.mode == "prompt":
            self._write(PROMPT)
        elif self.mode == "answer":
            self._write(ANSWER)


def read_lines(fd: int, post: Callable[[str | None], bool]) -> None:
    """Read lines from `fd` until its end (then None), handing each to `post` until it returns False.

    Plain os.read in a daemon thread: it holds no lock of sys.stdin that the interpreter's exit could wait
    for, and it works whatever stdin is (a terminal, a pipe, a file)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        pending += decoder.decode(chunk, final=not chunk)
        *lines, pending = pending.split("\n")
        for line in lines:
            if not post(line):
                return
        if not chunk:
            if pending:
                post(pending)
            post(None)
            return
