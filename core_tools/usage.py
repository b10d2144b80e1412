"""Usage and cost control: the price table, period windows, budgets (the LLM client's BudgetGate) and /usage.

Periods are calendar periods in the *user's* time zone (`users.timezone`, else the configured default zone):
"daily" caps and "today" run from local midnight to the next, "monthly" caps and "month" from the 1st of the
month, "week" from Monday. The current time comes from an injected clock, so tests drive the resets.

Costs are estimated at read time from the price table (per model, USD per million tokens), so a corrected
price also corrects past figures. A model with no price shows as "unknown" and adds nothing to a cost cap;
give it a price in LLM_PRICES, or use a token cap, to bound it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import NoReturn
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from core_tools.errors import BudgetExceeded
from core_tools.types import Notifier
from db.usage import ActivityCounts, BudgetRow, ModelUsage, UsageQueries, UserInfo

log = logging.getLogger(__name__)

PERIODS = ("daily", "monthly")
KINDS = ("cost", "tokens")
REPORT_PERIODS = ("today", "week", "month")
# A turn that started within budget may always give its closing no-tools answer ("final"): that bounds an
# overshoot to one call, and the user gets an answer built from the tool results already paid for.
EXEMPT_PURPOSES = frozenset({"final"})
STOP_LABELS = {
    "chain_limit": "chain limit",
    "repeat_guard": "repeated calls",
    "budget": "budget stop",
    "refused": "refused (cap)",
}


@dataclass(frozen=True)
class ModelPrice:
    """USD per million tokens; `cached_input` defaults to the input price when the provider gives none."""

    input: float
    output: float
    cached_input: float | None = None
    per_minute: float | None = None  # USD per minute of audio (transcription models)


# USD per million tokens, from the providers' public price pages as known in mid-2025 (OpenAI, Anthropic,
# Google); not verified online when written. Override or extend with LLM_PRICES.
PRICES_AS_OF = "2025-08 (public list prices; verify before relying on them)"
DEFAULT_PRICES: dict[str, ModelPrice] = {
    "gpt-5": ModelPrice(1.25, 10.00, 0.125),
    "gpt-5-mini": ModelPrice(0.25, 2.00, 0.025),
    "gpt-5-nano": ModelPrice(0.05, 0.40, 0.005),
    "gpt-4.1": ModelPrice(2.00, 8.00, 0.50),
    "gpt-4.1-mini": ModelPrice(0.40, 1.60, 0.10),
    "gpt-4.1-nano": ModelPrice(0.10, 0.40, 0.025),
    "gpt-4o": ModelPrice(2.50, 10.00, 1.25),
    "gpt-4o-mini": ModelPrice(0.15, 0.60, 0.075),
    "o3": ModelPrice(2.00, 8.00, 0.50),
    "o3-mini": ModelPrice(1.10, 4.40, 0.55),
    "o4-mini": ModelPrice(1.10, 4.40, 0.275),
    "text-embedding-3-small": ModelPrice(0.02, 0.0),
    "text-embedding-3-large": ModelPrice(0.13, 0.0),
    "claude-sonnet-4": ModelPrice(3.00, 15.00, 0.30),
    "claude-3-7-sonnet": ModelPrice(3.00, 15.00, 0.30),
    "claude-3-5-haiku": ModelPrice(0.80, 4.00, 0.08),
    "claude-opus-4": ModelPrice(15.00, 75.00, 1.50),
    "gemini-2.5-pro": ModelPrice(1.25, 10.00, 0.31),
    "gemini-2.5-flash": ModelPrice(0.30, 2.50, 0.075),
    "gemini-2.0-flash": ModelPrice(0.10, 0.40, 0.025),
    # Transcription (purpose `transcribe`): per minute of audio. Speech: per million input characters.
    "whisper-1": ModelPrice(0.0, 0.0, per_minute=0.006),
    "gpt-4o-transcribe": ModelPrice(0.0, 0.0, per_minute=0.006),
    "gpt-4o-mini-transcribe": ModelPrice(0.0, 0.0, per_minute=0.003),
    "whisper-large-v3": ModelPrice(0.0, 0.0, per_minute=0.00185),
    "whisper-large-v3-turbo": ModelPrice(0.0, 0.0, per_minute=0.000667),
    "tts-1": ModelPrice(15.00, 0.0),
    "tts-1-hd": ModelPrice(30.00, 0.0),
    "gpt-4o-mini-tts": ModelPrice(0.60, 12.00),
}


def parse_prices(raw: str | Mapping[str, object] | None) -> dict[str, ModelPrice]:
    """Parse LLM_PRICES (JSON `{"model": [input, output(, cached_input)]}`); raise ValueError when bad."""
    if raw is None or raw == "":
        return {}
    data = json.loads(raw) if isinstance(raw, str) else dict(raw)
    if not isinstance(data, dict):
        raise ValueError(
            "LLM_PRICES must be a JSON object of model -> [input, output] USD per million tokens"
        )
    out: dict[str, ModelPrice] = {}
    for model, value in data.items():
        try:
            if isinstance(value, list | tuple) and len(value) in (2, 3):
                nums = [float(v) for v in value]
                out[str(model)] = ModelPrice(nums[0], nums[1], nums[2] if len(nums) == 3 else None)
            elif isinstance(value, dict):
                cached = value.get("cached_input")
                minute = value.get("per_minute")  # {"per_minute": 0.006} alone prices a transcription model
                zero = 0.0 if minute is not None else None  # a per-minute price needs no token prices
                out[str(model)] = ModelPrice(
                    float(value["input"] if "input" in value or zero is None else zero),
                    float(value["output"] if "output" in value or zero is None else zero),
                    None if cached is None else float(cached),
                    None if minute is None else float(minute),
                )
            else:
                raise ValueError
        except (ValueError, TypeError, KeyError):
            raise ValueError(
                f"LLM_PRICES: price of {model!r} must be [input, output] or [input, output, cached_input]"
            ) from None
        price = out[str(model)]
        if min(price.input, price.output, price.cached_input or 0.0, price.per_minute or 0.0) < 0:
            raise ValueError(f"LLM_PRICES: price of {model!r} is negative")
    return out


class PriceTable:
    """Looks a model up by exact name, then without a provider prefix, then by the longest name prefix."""

    def __init__(self, prices: Mapping[str, ModelPrice] | None = None) -> None:
        self.prices = {k.lower(): v for k, v in {**DEFAULT_PRICES, **(prices or {})}.items()}

    def lookup(self, model: str) -> ModelPrice | None:
        """The price of `model` ("openai/gpt-4o-mini-2024-07-18" finds "gpt-4o-mini"), or None."""
        name = model.lower()
        for candidate in (name, name.rsplit("/", 1)[-1]):
            if candidate in self.prices:
                return self.prices[candidate]
            best = ""
            for key in self.prices:
                # A dated or tagged variant ("gpt-4o-2024-08-06", "gpt-4o:latest"), never "gpt-4ox".
                if candidate.startswith(key) and candidate[len(key)] in "-:@" and len(key) > len(best):
                    best = key
            if best:
                return self.prices[best]
        return None

    def cost(
        self, model: str, prompt: int, completion: int, cached: int = 0, audio_seconds: float = 0
    ) -> float | None:
        """Estimated USD of a call (prompt tokens include cached ones); None when the price is unknown."""
        price = self.lookup(model)
        if price is None:
            return None
        cached = min(cached, prompt)
        cached_price = price.input if price.cached_input is None else price.cached_input
        tokens = ((prompt - cached) * price.input + cached * cached_price + completion * price.output) / 1e6
        return tokens + (audio_seconds / 60 * (price.per_minute or 0.0))


@dataclass(frozen=True)
class Caps:
    """Default caps for every user (None: no cap)."""

    daily_usd: float | None = None
    monthly_usd: float | None = None
    daily_tokens: int | None = None
    monthly_tokens: int | None = None

    def get(self, period: str, kind: str) -> float | None:
        """The default of one period and kind."""
        value: float | int | None = getattr(self, f"{period}_{'usd' if kind == 'cost' else 'tokens'}")
        return None if value is None else float(value)


@dataclass(frozen=True)
class Window:
    """A calendar period [start, end) in a time zone."""

    name: str  # today | week | month
    start: datetime  # aware
    end: datetime
    tz: ZoneInfo

    def label(self) -> str:
        """'today', 'this week' or 'this month', with its local start."""
        local = self.start.astimezone(self.tz)
        if self.name == "today":
            return f"today ({local:%a %d %b}, {self.tz.key})"
        if self.name == "week":
            return f"this week (from {local:%a %d %b}, {self.tz.key})"
        return f"this month ({local:%B %Y}, {self.tz.key})"


def window(name: str, now: datetime, tz: ZoneInfo) -> Window:
    """The calendar period `name` (today|daily, week, month|monthly) containing `now`, in zone `tz`."""
    local = now.astimezone(tz)
    if name in ("today", "daily"):
        start = datetime(local.year, local.month, local.day, tzinfo=tz)
        nxt = start.date() + timedelta(days=1)
        end = datetime(nxt.year, nxt.month, nxt.day, tzinfo=tz)
        name = "today"
    elif name == "week":
        monday = local.date() - timedelta(days=local.weekday())
        start = datetime(monday.year, monday.month, monday.day, tzinfo=tz)
        nxt = monday + timedelta(days=7)
        end = datetime(nxt.year, nxt.month, nxt.day, tzinfo=tz)
    elif name in ("month", "monthly"):
        start = datetime(local.year, local.month, 1, tzinfo=tz)
        year, month = (local.year + 1, 1) if local.month == 12 else (local.year, local.month + 1)
        end = datetime(year, month, 1, tzinfo=tz)
        name = "month"
    else:
        raise ValueError(f"unknown period {name!r}")
    return Window(name, start.astimezone(UTC), end.astimezone(UTC), tz)


@dataclass(frozen=True)
class Spend:
    """Tokens and estimated cost of some LLM calls."""

    tokens: int = 0
    cost: float = 0.0
    unpriced_models: tuple[str, ...] = ()  # models with calls but no price: their cost is unknown
    estimated_calls: int = 0


def spend_of(rows: list[ModelUsage], prices: PriceTable) -> Spend:
    """Sum tokens and the estimated cost of usage rows."""
    tokens, cost, estimated = 0, 0.0, 0
    unpriced: set[str] = set()
    for r in rows:
        tokens += r.prompt_tokens + r.completion_tokens
        estimated += r.estimated_calls
        c = prices.cost(r.model, r.prompt_tokens, r.completion_tokens, r.cached_tokens, r.audio_seconds)
        if c is None:
            if r.prompt_tokens or r.completion_tokens or r.audio_seconds:
                unpriced.add(r.model)
        else:
            cost += c
    return Spend(tokens, cost, tuple(sorted(unpriced)), estimated)


@dataclass(frozen=True)
class CapStatus:
    """One effective cap of a user and what is spent against it."""

    period: str  # daily | monthly
    kind: str  # cost | tokens
    limit: float
    spent: float
    window: Window
    source: str  # "default" | "owner"
    reserved: float = 0.0  # held by requests in flight (their estimates), not yet recorded

    @property
    def reached(self) -> bool:
        """Spending plus what requests in flight reserved is at or over the cap: the next one must wait."""
        return self.spent + self.reserved >= self.limit


@dataclass
class Hold:
    """What one request in flight reserved against its user's caps; released once its usage is recorded."""

    user_id: int | None
    tokens: int = 0
    cost: float = 0.0
    key: int = 0
    _release: Callable[[Hold], None] | None = field(default=None, repr=False)

    def release(self) -> None:
        """Give the reservation back (idempotent): the request's usage is recorded by now, or it failed."""
        release, self._release = self._release, None
        if release is not None:
            release(self)


@dataclass
class PurposeLine:
    """One purpose in a report."""

    purpose: str
    calls: int = 0
    tokens: int = 0
    cost: float = 0.0
    cost_unknown: bool = False


@dataclass
class UsageReport:
    """A user's usage in one window."""

    user_id: int
    window: Window
    spend: Spend
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    llm_calls: int
    llm_errors: int
    purposes: list[PurposeLine]
    activity: ActivityCounts
    caps: list[CapStatus] = field(default_factory=list)
    models: list[PurposeLine] = field(default_factory=list)  # the same figures per model (`purpose`)


def usd(value: float) -> str:
    """Money, compact: $0, $0.0042, $1.25."""
    if value == 0:
        return "$0"
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def tokens_str(n: float) -> str:
    """Token counts, compact: 950, 12.3k, 1.25M."""
    if n < 1000:
        return f"{int(n)}"
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.2f}M"


def _duration(delta: timedelta) -> str:
    minutes = max(1, int(delta.total_seconds() // 60))
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    return f"{hours} h {mins} min" if hours else f"{mins} min"


def describe_reset(w: Window, now: datetime) -> str:
    """'at 00:00 (UTC), in 3 h 5 min' or 'on 1 Dec at 00:00 (UTC), in 7 d 4 h'."""
    local = w.end.astimezone(w.tz)
    when = f"at {local:%H:%M}" if w.name == "today" else f"on {local.day} {local:%b} at {local:%H:%M}"
    return f"{when} ({w.tz.key}), in {_duration(w.end - now)}"


def _amount(kind: str, value: float) -> str:
    return usd(value) if kind == "cost" else f"{tokens_str(value)} tokens"


class UsageService:
    """Accounting queries, budgets and the owner's view; the LLM client's and the agent's budget gate."""

    def __init__(
        self,
        queries: UsageQueries,
        *,
        prices: Mapping[str, ModelPrice] | None = None,
        defaults: Caps | None = None,
        owner_id: int | None = None,
        default_timezone: str = "UTC",
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        notifier: Notifier | None = None,
    ) -> None:
        self.queries = queries
        self.prices = PriceTable(prices)
        self.defaults = defaults or Caps()
        self.owner_id = owner_id
        self.default_timezone = default_timezone
        self.clock = clock
        self.notifier = notifier  # set by the bot once it exists
        self._tasks: set[asyncio.Task[None]] = set()
        # The reservation ledger: estimates of requests in flight, per user. In-process on purpose: the bot
        # is one process and every LLM/embedding request passes `reserve`. The lock makes "check the caps,
        # then reserve" one step, so parallel requests (one reply's tool calls, a job, a summary) cannot all
        # pass a cap before any of them is recorded; a thread calling in is covered too.
        self._lock = threading.RLock()
        self._held: dict[int, dict[int, Hold]] = {}
        self._hold_ids = itertools.count(1)

    # ------------------------------------------------------------------ time zones and caps

    def timezone(self, user_id: int | None) -> ZoneInfo:
        """The user's zone (else the default, else UTC): periods are calendar periods there."""
        name = (self.queries.user_timezone(user_id) if user_id is not None else None) or self.default_timezone
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            return ZoneInfo("UTC")

    def effective_caps(self, user_id: int) -> dict[tuple[str, str], tuple[float | None, str]]:
        """(period, kind) -> (limit or None, "default" | "owner") for one user."""
        caps: dict[tuple[str, str], tuple[float | None, str]] = {
            (p, k): (self.defaults.get(p, k), "default") for p in PERIODS for k in KINDS
        }
        for row in self.queries.budgets(user_id):
            caps[(row.period, row.kind)] = (row.limit, "owner")
        return caps

    def cap_status(self, user_id: int) -> list[CapStatus]:
        """Every cap that applies to the user, with the current spend against it."""
        now = self.clock()
        tz: ZoneInfo | None = None
        out: list[CapStatus] = []
        caps = self.effective_caps(user_id)
        for period in PERIODS:
            active = [(k, caps[(period, k)]) for k in KINDS if caps[(period, k)][0] is not None]
            if not active:
                continue  # no cap, no queries: the common case costs one small read per request
            tz = tz or self.timezone(user_id)
            w = window(period, now, tz)
            spend = spend_of(self.queries.model_usage(user_id, w.start, w.end), self.prices)
            with self._lock:
                held = list(self._held.get(user_id, {}).values())
            for kind, (limit, source) in active:
                assert limit is not None
                spent = spend.cost if kind == "cost" else float(spend.tokens)
                reserved = sum(h.cost if kind == "cost" else float(h.tokens) for h in held)
                out.append(CapStatus(period, kind, limit, spent, w, source, reserved))
        return out

    def _reached(self, user_id: int) -> CapStatus | None:
        return next((c for c in self.cap_status(user_id) if c.reached), None)

    def refusal(self, cap: CapStatus) -> str:
        """The user-facing line: which cap, the current spend, when it resets."""
        now = self.clock()
        spent_when = "today" if cap.period == "daily" else "this month"
        held = (
            f" and {_amount(cap.kind, cap.reserved)} is reserved by requests still running"
            if cap.reserved > 0
            else ""
        )
        return (
            f"Usage cap reached: your {cap.period} {'cost' if cap.kind == 'cost' else 'token'} cap is "
            f"{_amount(cap.kind, cap.limit)} and {_amount(cap.kind, cap.spent)} is spent {spent_when}"
            f"{' (estimated)' if cap.kind == 'cost' else ''}{held}. "
            f"It resets {describe_reset(cap.window, now)}. "
            "Send /usage for details; the owner can change caps with /budget."
        )

    # ------------------------------------------------------------------ the gate

    def check(self, user_id: int | None, purpose: str = "chat") -> None:
        """Raise BudgetExceeded before a request when the user is at or over a cap ("final" is exempt)."""
        if user_id is None or purpose in EXEMPT_PURPOSES:
            return
        cap = self._reached(user_id)
        if cap is not None:
            self._refuse(user_id, purpose, cap)

    def reserve(
        self,
        user_id: int | None,
        purpose: str,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        audio_seconds: float = 0,
    ) -> Hold:
        """Check the caps counting what requests in flight reserved, then reserve this request's estimate.

        Raises BudgetExceeded like `check` ("final" is never refused, but it reserves). The caller records
        the request's real usage, then releases the hold: that settles the estimate. A request is admitted
        while spent + reserved is under the cap, so parallel requests overshoot a cap by at most one request
        (when its estimate bounds it: the LLM client sends the completion ceiling as the request's maximum).
        """
        if user_id is None:
            return Hold(None)
        tokens = max(0, prompt_tokens) + max(0, completion_tokens)
        cost = (
            self.prices.cost(model, max(0, prompt_tokens), max(0, completion_tokens), 0, audio_seconds) or 0.0
        )
        with self._lock:
            cap = None if purpose in EXEMPT_PURPOSES else self._reached(user_id)
            if cap is None:
                hold = Hold(user_id, tokens, cost, next(self._hold_ids), self._release)
                self._held.setdefault(user_id, {})[hold.key] = hold
                return hold
        self._refuse(user_id, purpose, cap)

    def _release(self, hold: Hold) -> None:
        assert hold.user_id is not None
        with self._lock:
            mine = self._held.get(hold.user_id, {})
            mine.pop(hold.key, None)
            if not mine:
                self._held.pop(hold.user_id, None)

    def reserved(self, user_id: int) -> int:
        """Tokens reserved by the user's requests in flight."""
        with self._lock:
            return sum(h.tokens for h in self._held.get(user_id, {}).values())

    def _refuse(self, user_id: int, purpose: str, cap: CapStatus) -> NoReturn:
        self.queries.record_turn_event(
            user_id=user_id, session_id=None, kind="refused", detail=f"{purpose}: {cap.period} {cap.kind}"
        )
        self._tell_owner(user_id, cap)
        log.info("refused a %s request of user %s: %s %s cap reached", purpose, user_id, cap.period, cap.kind)
        raise BudgetExceeded(self.refusal(cap))

    def over_budget(self, user_id: int) -> str | None:
        """The refusal text when the user is at or over a cap (the agent stops using tools), else None."""
        cap = self._reached(user_id)
        if cap is None:
            return None
        self._tell_owner(user_id, cap)
        return self.refusal(cap)

    def turn_stopped(self, user_id: int, session_id: str, reason: str) -> None:
        """Count a turn cut short by loop protection or the budget (shown in /usage)."""
        try:
            self.queries.record_turn_event(user_id=user_id, session_id=session_id, kind=reason, detail=None)
        except Exception:  # accounting must not break the answer the user is waiting for
            log.exception("could not record a turn event")

    # ------------------------------------------------------------------ the owner

    def is_owner(self, user_id: int) -> bool:
        """The owner may see everyone's usage and set caps."""
        return self.owner_id is not None and user_id == self.owner_id

    def _tell_owner(self, user_id: int, cap: CapStatus) -> None:
        # The owner sees their own refusals directly; others are reported once per cap and period window,
        # once the cap is really spent (not while requests in flight merely hold part of it).
        if self.owner_id is None or user_id == self.owner_id or cap.spent < cap.limit:
            return
        try:
            first = self.queries.claim_notice(
                user_id=user_id, period=cap.period, kind=cap.kind, window_start=cap.window.start
            )
        except Exception:
            log.exception("could not record a budget notice")
            return
        if not first or self.notifier is None:
            return
        who = self.describe_user(user_id)
        text = (
            f"{who} reached the {cap.period} {cap.kind} cap: {_amount(cap.kind, cap.spent)} of "
            f"{_amount(cap.kind, cap.limit)}. Their requests are refused until it resets "
            f"{describe_reset(cap.window, self.clock())}. "
            f"Change it with /budget {user_id} {cap.period} AMOUNT."
        )
        try:
            task = asyncio.get_running_loop().create_task(self._send(self.owner_id, text))
        except RuntimeError:  # no running loop (a synchronous caller): the notice row still marks it
            log.warning("could not tell the owner (no event loop): %s", text)
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, chat_id: int, text: str) -> None:
        assert self.notifier is not None
        try:
            await self.notifier.send(chat_id, text)
        except Exception:
            log.exception("could not tell the owner that a user reached a cap")

    async def drain(self) -> None:
        """Wait for owner notices still being sent (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def describe_user(self, user_id: int, info: UserInfo | None = None) -> str:
        """'Ann (111)', or the bare id for a user the bot has not met."""
        info = info or self.queries.users([user_id]).get(user_id)
        name = (info.first_name or (f"@{info.username}" if info.username else None)) if info else None
        return f"{name} ({user_id})" if name else str(user_id)

    def set_cap(self, *, by: int, user_id: int, period: str, kind: str | None, limit: float | None) -> None:
        """Set (limit) or lift (None) a user's cap; `kind` None with limit None lifts both kinds."""
        if period not in PERIODS:
            raise ValueError(f"period must be one of {', '.join(PERIODS)}")
        if limit is not None and (limit < 0 or kind not in KINDS):
            raise ValueError("a cap needs a kind (cost or tokens) and a non-negative amount")
        for k in [kind] if kind else list(KINDS):
            assert k is not None
            self.queries.set_budget(user_id=user_id, period=period, kind=k, limit=limit, set_by=by)

    def reset_cap(self, *, user_id: int, period: str, kind: str | None) -> int:
        """Drop the owner's caps of a period (one kind or both) so the defaults apply again."""
        if period not in PERIODS:
            raise ValueError(f"period must be one of {', '.join(PERIODS)}")
        return self.queries.clear_budget(user_id=user_id, period=period, kind=kind)

    def budget_overrides(self) -> list[BudgetRow]:
        """Every owner-set cap."""
        return self.queries.budgets()

    # ------------------------------------------------------------------ reports

    def report(self, user_id: int, period: str = "today") -> UsageReport:
        """A user's usage in the current calendar `period` (today, week, month)."""
        w = window(period, self.clock(), self.timezone(user_id))
        rows = self.queries.model_usage(user_id, w.start, w.end)
        purposes: dict[str, PurposeLine] = {}
        models: dict[str, PurposeLine] = {}
        for r in rows:
            c = self.prices.cost(r.model, r.prompt_tokens, r.completion_tokens, r.cached_tokens)
            for line in (
                purposes.setdefault(r.purpose, PurposeLine(r.purpose)),
                models.setdefault(r.model, PurposeLine(r.model)),
            ):
                line.calls += r.calls
                line.tokens += r.prompt_tokens + r.completion_tokens
                if c is None:
                    line.cost_unknown = line.cost_unknown or bool(r.prompt_tokens or r.completion_tokens)
                else:
                    line.cost += c
        return UsageReport(
            user_id=user_id,
            window=w,
            spend=spend_of(rows, self.prices),
            prompt_tokens=sum(r.prompt_tokens for r in rows),
            completion_tokens=sum(r.completion_tokens for r in rows),
            cached_tokens=sum(r.cached_tokens for r in rows),
            llm_calls=sum(r.calls for r in rows),
            llm_errors=sum(r.errors for r in rows),
            purposes=sorted(purposes.values(), key=lambda p: (-p.tokens, p.purpose)),
            models=sorted(models.values(), key=lambda p: (-p.tokens, p.purpose)),
            activity=self.queries.activity(user_id, w.start, w.end),
            caps=self.cap_status(user_id),
        )

    def format_report(self, rep: UsageReport) -> str:
        """The /usage text: compact plain text for a phone screen."""
        now = self.clock()
        s, a = rep.spend, rep.activity
        est = "~" if s.estimated_calls else ""
        lines = [f"Usage {rep.window.label()}"]
        if not rep.llm_calls and not a.turns and not a.events:
            lines.append("Nothing yet.")
        else:
            cached = f", {tokens_str(rep.cached_tokens)} cached" if rep.cached_tokens else ""
            lines.append(
                f"Tokens: {est}{tokens_str(s.tokens)} (in {tokens_str(rep.prompt_tokens)}{cached}, "
                f"out {tokens_str(rep.completion_tokens)})"
            )
            lines.append(f"Estimated cost: {self._cost_text(s)}")
            turns = f"Turns: {a.turns}" + (f" ({a.failed_turns} failed)" if a.failed_turns else "")
            calls = f"LLM calls: {rep.llm_calls}" + (f" ({rep.llm_errors} failed)" if rep.llm_errors else "")
            lines.append(f"{turns} · {calls}")
            if a.tools:
                tools = ", ".join(f"{name} {n}" for name, n in a.tools.items())
                errs = f" ({a.tool_errors} failed)" if a.tool_errors else ""
                lines.append(f"Tool calls: {sum(a.tools.values())}{errs}: {tools}")
            if a.code_runs:
                failed = f" ({a.code_failures} failed)" if a.code_failures else ""
                lines.append(f"Code runs: {a.code_runs}{failed}")
            if a.events:
                stops = ", ".join(f"{STOP_LABELS.get(k, k)} {n}" for k, n in sorted(a.events.items()))
                lines.append(f"Stopped: {stops}")
            for title, group in (("By purpose:", rep.purposes), ("By model:", rep.models)):
                if not group:
                    continue
                lines.append(title)
                for p in group:
                    cost = "cost unknown" if p.cost_unknown and not p.cost else usd(p.cost)
                    if p.cost_unknown and p.cost:
                        cost += " + unknown"
                    n = f"{p.calls} call{'s' if p.calls != 1 else ''}"
                    lines.append(f"  {p.purpose}: {n}, {tokens_str(p.tokens)} tokens, {cost}")
        for cap in rep.caps:
            mark = " - reached" if cap.reached else ""
            held = (
                f" (+{_amount(cap.kind, cap.reserved)} reserved by running requests)" if cap.reserved else ""
            )
            lines.append(
                f"{cap.period.capitalize()} {cap.kind} cap: {_amount(cap.kind, cap.spent)}{held} of "
                f"{_amount(cap.kind, cap.limit)}{mark}, resets {describe_reset(cap.window, now)}"
            )
        if s.estimated_calls:
            lines.append(f"~ {s.estimated_calls} call(s) reported no usage: their tokens are estimated.")
        return "\n".join(lines)

    @staticmethod
    def _cost_text(s: Spend) -> str:
        if not s.unpriced_models:
            return usd(s.cost)
        unknown = f"unknown for {', '.join(s.unpriced_models)} (no price; see LLM_PRICES)"
        return f"{usd(s.cost)} + {unknown}" if s.cost else unknown

    def format_all(self, period: str = "today") -> str:
        """The owner's `/usage all`: one line per user, then the total (periods in the owner's zone)."""
        w = window(period, self.clock(), self.timezone(self.owner_id))
        ids = self.queries.active_users(w.start, w.end)
        infos = self.queries.users(ids)
        lines = [f"Usage of all users {w.label()}"]
        total_rows: list[ModelUsage] = []
        total_turns = 0
        for uid in ids:
            rows = self.queries.model_usage(uid, w.start, w.end)
            total_rows.extend(rows)
            s = spend_of(rows, self.prices)
            act = self.queries.activity(uid, w.start, w.end)
            total_turns += act.turns
            reached = [c for c in self.cap_status(uid) if c.reached]
            flag = f" - {reached[0].period} {reached[0].kind} cap reached" if reached else ""
            est = "~" if s.estimated_calls else ""
            lines.append(
                f"{self.describe_user(uid, infos.get(uid))}: {est}{tokens_str(s.tokens)} tokens, "
                f"{self._cost_text(s)}, {act.turns} turn{'s' if act.turns != 1 else ''}{flag}"
            )
        if not ids:
            lines.append("Nobody used the assistant in this period.")
        else:
            t = spend_of(total_rows, self.prices)
            lines.append(f"Total: {tokens_str(t.tokens)} tokens, {self._cost_text(t)}, {total_turns} turns")
        return "\n".join(lines)

    def format_budgets(self, user_id: int | None = None) -> str:
        """The owner's `/budget` view: the defaults, then each user's caps and spend."""
        d = self.defaults
        defaults = ", ".join(
            f"{p} {k} {_amount(k, v) if (v := d.get(p, k)) is not None else 'none'}"
            for p in PERIODS
            for k in KINDS
        )
        lines = [f"Default caps: {defaults}"]
        ids = [user_id] if user_id is not None else sorted({r.user_id for r in self.budget_overrides()})
        for uid in ids:
            caps = self.effective_caps(uid)
            status = {(c.period, c.kind): c for c in self.cap_status(uid)}
            parts = []
            for (p, k), (limit, source) in caps.items():
                if limit is None:
                    if source == "owner":
                        parts.append(f"{p} {k}: no cap")
                    continue
                spent = status[(p, k)].spent
                origin = "" if source == "owner" else " (default)"
                parts.append(f"{p} {k}: {_amount(k, spent)} of {_amount(k, limit)}{origin}")
            lines.append(f"{self.describe_user(uid)}: {'; '.join(parts) or 'no caps'}")
        return "\n".join(lines)
