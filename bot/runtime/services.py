"""What the composition root (bot/process/wiring.py) builds and every front end and the runtime are handed:
the services, each built once. This module only names them; nothing here builds one."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from bot.config.settings import Settings
from bot.runtime.replica import Replica
from core_tools.agent import Agent
from core_tools.approval import ApprovalGate
from core_tools.checkin.service import CheckinService
from core_tools.code.tool import CodeTool
from core_tools.llm import AudioClient, ChatClient
from core_tools.media import MediaService
from core_tools.memory.extract import MemoryExtractor
from core_tools.memory.store import MemoryStore
from core_tools.registry import ToolRegistry
from core_tools.sandbox.toolkit import Toolkit
from core_tools.schedule.tool import ScheduleTool
from core_tools.sessions import SessionManager
from core_tools.tools.search import SearchTool
from core_tools.types import FileSink, Notifier
from core_tools.usage import UsageService
from db.conversations import Conversations
from db.usage import UsageLog

if TYPE_CHECKING:  # the MCP SDK is imported only where MCP_SERVERS_FILE is set
    from core_tools.mcp.client import McpServers

log = logging.getLogger(__name__)


@dataclass
class Services:
    """Everything the front ends (Telegram, terminal) use."""

    settings: Settings
    engine: Engine
    conversations: Conversations
    usage: UsageLog
    llm: ChatClient
    registry: ToolRegistry
    agent: Agent
    sessions: SessionManager
    search: SearchTool
    code: CodeTool
    memory: MemoryStore
    usage_service: UsageService
    extractor: MemoryExtractor
    schedules: ScheduleTool
    replica: Replica
    # The front end's (Outlets): where notices and code files go outside a turn.
    notifier: Notifier | None = None
    files: FileSink | None = None
    mcp: McpServers | None = None
    media: MediaService | None = None
    audio: AudioClient | None = None
    # The sandbox's data toolkit, installed in the background at start when missing.
    toolkit: Toolkit | None = None
    # Asks the user before the calls APPROVE_TOOLS or MCP `confirm` names (bot/adapter/approvals.py).
    approvals: ApprovalGate | None = None
    # Check-ins (/checkin): planned without an LLM when their schedule fires (bot/runtime/checkin_jobs.py).
    checkins: CheckinService | None = None

    async def start(self) -> None:
        """Report code jobs a restart interrupted; connect the MCP servers (a failing one is retried)."""
        await self.code.recover()
        if self.code.lessons is not None:  # the lessons of users with recent failures, from one query
            await asyncio.to_thread(self.code.lessons.warm)
        if self.toolkit is not None:
            self.toolkit.start()
        if self.mcp is not None:
            await self.mcp.start()
            for line in self.mcp.lines():
                log.info("MCP %s", line)

    async def aclose(self) -> None:
        """Sign off (other processes take this one's chats at once), deliver pending notices, then release
        connections."""
        await self.replica.leave()
        await self.code.aclose()
        if self.toolkit is not None:
            await self.toolkit.aclose()
        if self.mcp is not None:
            await self.mcp.aclose()
        await self.extractor.aclose()
        if self.media is not None:
            await self.media.reader.aclose()  # its worker started ahead
        if self.audio is not None:
            await self.audio.close()
        await self.usage_service.drain()
        await self.llm.close()
        await self.search.aclose()
        close_embedder = getattr(self.memory.embedder, "aclose", None)
        if close_embedder is not None:
            await close_embedder()
        self.engine.dispose()
