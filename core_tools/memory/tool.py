"""The `memory` tool the model calls: store, recall, list, forget, new_session.

A memory stored in a turn that had read untrusted content (search or fetch results, an MCP tool: anything but
`memory` and `code`) is saved with origin "tool" and marked untrusted: it may carry a page's words, not the
user's (issue 17, item 8). The turn's tool calls are read from the conversation, where the assistant message
that asked for them is written before they run, so a `fetch` in the same round counts too.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from core_tools.capabilities import declares
from core_tools.errors import ToolError
from core_tools.memory.passage import MAX_SPEAKER_CHARS
from core_tools.memory.store import DATA_NOTE, MemoryStore
from core_tools.types import ToolContext
from db.conversations import Conversations

Layer = Literal["long", "mid", "short", "session"]
StartNewSession = Callable[[int, int, str | None], Awaitable[str]]
# Tools whose results are the assistant's own work or the user's memory; any other brings in outside text.
TRUSTED_TOOLS = frozenset({"memory", "code"})
_WORD = re.compile(r"\w+", re.UNICODE)
# A session-layer memory with exactly this content is the older way to ask for a new session (issue 25,
# item 7): it starts one, as action=new_session does, and is never kept as a memory.
NEW_SESSION_MARK = "__NEW_SESSION__"


def turn_tools(conversations: Conversations, session_id: str) -> set[str]:
    """Names of the tools called so far in the session's current turn (since its last user message)."""
    names: set[str] = set()
    for m in reversed(conversations.messages(session_id, limit=100)):
        if m.role == "user":
            break
        for c in m.tool_calls or []:
            names.add(str(c.get("name", "")))
        if m.tool_name:
            names.add(m.tool_name)
    return names


def from_user(content: str, user_message: str) -> bool:
    """Whether most words of `content` are the user's own words in this turn."""
    words = {w for w in _WORD.findall(content.lower()) if len(w) > 2}
    said = set(_WORD.findall(user_message.lower()))
    return bool(words) and len(words & said) >= 0.6 * len(words)


class MemoryTool:
    """The `memory` tool the model calls."""

    def __init__(
        self,
        store: MemoryStore,
        start_new_session: StartNewSession | None = None,
        conversations: Conversations | None = None,
    ) -> None:
        self.store = store
        self._start_new_session = start_new_session
        self._conversations = conversations

    def _origin(self, ctx: ToolContext, content: str) -> tuple[str, bool]:
        """Where a stored memory comes from: (origin, untrusted)."""
        conv = self._conversations
        if conv is not None and turn_tools(conv, ctx.session_id) - TRUSTED_TOOLS:
            return "tool", True
        return ("user" if from_user(content, ctx.trigger_message) else "model"), False

    @declares(reads=["memory"], writes=["memory"])
    async def memory(
        self,
        ctx: ToolContext,
        action: Annotated[
            Literal["store", "recall", "list", "forget", "new_session"],
            Field(
                description="store: save content; recall: search by query; list: recent memories with ids; "
                "forget: delete memory_id; new_session: start a fresh conversation session "
                "(content = its name)"
            ),
        ],
        layer: Annotated[
            Layer | None,
            Field(
                description="long: permanent facts, preferences, relationships; "
                "mid: goals, plans, projects (~90 days); short: recent context and summaries (~14 days); "
                "session: this conversation only. Required for store; optional filter for recall and list"
            ),
        ] = None,
        content: Annotated[
            str | None,
            Field(
                description="store: the memory as one short self-contained sentence; new_session: its name"
            ),
        ] = None,
        category: Annotated[
            str | None,
            Field(
                description="long: fact|preference|relationship; mid: goal|plan|project; "
                "short: context|summary; session: note|task. Defaults to the first one"
            ),
        ] = None,
        certainty: Annotated[
            float | None, Field(ge=0, le=1, description="0-1, how sure a goal or plan is (mid layer)")
        ] = None,
        query: Annotated[
            str | None,
            Field(description="recall: what to look for (meaning, not just words); empty = recent"),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=50, description="recall/list: at most this many")] = 10,
        memory_id: Annotated[str | None, Field(description="forget: the id of the memory to delete")] = None,
        supersedes: Annotated[
            str | None,
            Field(
                description="store: id of an older memory this one corrects; "
                "it is kept but no longer recalled"
            ),
        ] = None,
        said_by: Annotated[
            str | None,
            Field(
                max_length=MAX_SPEAKER_CHARS,
                description="store: who said it, when not the user (a forwarded message's author, someone "
                "the user quotes); a recall naming them ranks their memories first",
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Remember things about the user across conversations, in four layers, and recall them by meaning.

        Store facts the user tells you (long), their goals and plans (mid), recent context (short) and notes
        for the current conversation (session). Recall before answering questions about the user. A stored
        memory that restates, details or contradicts an older one may update or supersede it; the result says
        so, and the old text is kept. Use `supersedes` when you know which memory is now wrong.
        """
        if action == "store":
            if layer is None:
                raise ToolError("store needs a layer: long, mid, short or session")
            if not content or not content.strip():
                raise ToolError("store needs content: the thing to remember")
            if content.strip() == NEW_SESSION_MARK:
                if layer != "session":
                    raise ToolError(
                        f"{NEW_SESSION_MARK} starts a new session only in the session layer; "
                        "use action=new_session (or layer=session) for that"
                    )
                return await self._new_session(ctx, None)
            origin, untrusted = self._origin(ctx, content)
            result = await self.store.store(
                ctx.user_id,
                layer,
                content,
                category=category,
                certainty=certainty,
                session_id=ctx.session_id,
                supersedes=supersedes,
                origin=origin,
                untrusted=untrusted,
                # What the user said in this turn: the memory is found by their words too (passage.py).
                context=ctx.trigger_message or None,
                speaker=said_by,
            )
            return {"success": True, **result, "note": DATA_NOTE}
        if action == "recall":
            if layer is not None:
                self.store.check_layer_category(layer, None)
            found = await self.store.recall(
                ctx.user_id, query, layer=layer, limit=limit, session_id=ctx.session_id
            )
            if ctx.recalled is not None:
                ctx.recalled(found)
            return {"success": True, "memories": found, "note": DATA_NOTE}
        if action == "list":
            if layer is not None:
                self.store.check_layer_category(layer, None)
            listed = await self.store.list_memories(
                ctx.user_id, layer=layer, limit=limit, session_id=ctx.session_id
            )
            return {"success": True, "memories": listed, "note": DATA_NOTE}
        if action == "forget":
            if not memory_id:
                raise ToolError("forget needs memory_id (list or recall shows the ids)")
            gone = await self.store.forget(ctx.user_id, memory_id, actor="model")
            if gone is None:
                raise ToolError(f"no memory with id {memory_id!r}")
            return {"success": True, "forgotten": gone, "note": DATA_NOTE}
        if action == "new_session":
            return await self._new_session(ctx, content.strip() if content and content.strip() else None)
        raise ToolError(f"unknown action {action!r}; use store, recall, list, forget or new_session")

    async def _new_session(self, ctx: ToolContext, name: str | None) -> dict[str, Any]:
        """Start a new session in the caller's chat (action=new_session, or the session mark stored)."""
        if self._start_new_session is None:
            raise ToolError("starting a new session is not available here")
        new_id = await self._start_new_session(ctx.user_id, ctx.chat_id, name)
        return {"success": True, "session_id": new_id, "name": name}
