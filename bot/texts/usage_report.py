"""How /usage and /budget read in the chat: compact plain text for a phone screen; core_tools.usage counts."""

from __future__ import annotations

from datetime import datetime

from core_tools.usage.amounts import amount, describe_reset, tokens_str, usd
from core_tools.usage.caps import KINDS, PERIODS, Window
from core_tools.usage.prices import Spend
from core_tools.usage.service import AllUsage, UsageReport, UsageService

STOP_LABELS = {
    "chain_limit": "chain limit",
    "repeat_guard": "repeated calls",
    "budget": "budget stop",
    "refused": "refused (cap)",
}


def window_label(w: Window) -> str:
    """'today', 'this week' or 'this month', with its local start."""
    local = w.start.astimezone(w.tz)
    if w.name == "today":
        return f"today ({local:%a %d %b}, {w.tz.key})"
    if w.name == "week":
        return f"this week (from {local:%a %d %b}, {w.tz.key})"
    return f"this month ({local:%B %Y}, {w.tz.key})"


def cost_text(s: Spend) -> str:
    """The estimated cost, naming the models without a price."""
    if not s.unpriced_models:
        return usd(s.cost)
    unknown = f"unknown for {', '.join(s.unpriced_models)} (no price; see LLM_PRICES)"
    return f"{usd(s.cost)} + {unknown}" if s.cost else unknown


def format_report(rep: UsageReport, now: datetime) -> str:
    """The /usage text of one user's report; `now` is when the caps' resets are counted from."""
    s, a = rep.spend, rep.activity
    est = "~" if s.estimated_calls else ""
    lines = [f"Usage {window_label(rep.window)}"]
    if not rep.llm_calls and not a.turns and not a.events:
        lines.append("Nothing yet.")
    else:
        cached = f", {tokens_str(rep.cached_tokens)} cached" if rep.cached_tokens else ""
        lines.append(
            f"Tokens: {est}{tokens_str(s.tokens)} (in {tokens_str(rep.prompt_tokens)}{cached}, "
            f"out {tokens_str(rep.completion_tokens)})"
        )
        lines.append(f"Estimated cost: {cost_text(s)}")
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
        held = f" (+{amount(cap.kind, cap.reserved)} reserved by running requests)" if cap.reserved else ""
        lines.append(
            f"{cap.period.capitalize()} {cap.kind} cap: {amount(cap.kind, cap.spent)}{held} of "
            f"{amount(cap.kind, cap.limit)}{mark}, resets {describe_reset(cap.window, now)}"
        )
    if s.estimated_calls:
        lines.append(f"~ {s.estimated_calls} call(s) reported no usage: their tokens are estimated.")
    return "\n".join(lines)


def format_all(everyone: AllUsage) -> str:
    """The owner's `/usage all`: one line per user, then the total."""
    lines = [f"Usage of all users {window_label(everyone.window)}"]
    for u in everyone.users:
        flag = f" - {u.reached.period} {u.reached.kind} cap reached" if u.reached else ""
        est = "~" if u.spend.estimated_calls else ""
        lines.append(
            f"{u.who}: {est}{tokens_str(u.spend.tokens)} tokens, "
            f"{cost_text(u.spend)}, {u.turns} turn{'s' if u.turns != 1 else ''}{flag}"
        )
    if not everyone.users:
        lines.append("Nobody used the assistant in this period.")
    else:
        t = everyone.total
        lines.append(f"Total: {tokens_str(t.tokens)} tokens, {cost_text(t)}, {everyone.total_turns} turns")
    return "\n".join(lines)


def format_budgets(service: UsageService, user_id: int | None = None) -> str:
    """The owner's `/budget` view: the defaults, then each user's caps and spend."""
    d = service.defaults
    defaults = ", ".join(
        f"{p} {k} {amount(k, v) if (v := d.get(p, k)) is not None else 'none'}"
        for p in PERIODS
        for k in KINDS
    )
    lines = [f"Default caps: {defaults}"]
    ids = [user_id] if user_id is not None else sorted({r.user_id for r in service.budget_overrides()})
    for uid in ids:
        caps = service.effective_caps(uid)
        status = {(c.period, c.kind): c for c in service.cap_status(uid)}
        parts = []
        for (p, k), (limit, source) in caps.items():
            if limit is None:
                if source == "owner":
                    parts.append(f"{p} {k}: no cap")
                continue
            spent = status[(p, k)].spent
            origin = "" if source == "owner" else " (default)"
            parts.append(f"{p} {k}: {amount(k, spent)} of {amount(k, limit)}{origin}")
        lines.append(f"{service.describe_user(uid)}: {'; '.join(parts) or 'no caps'}")
    return "\n".join(lines)
