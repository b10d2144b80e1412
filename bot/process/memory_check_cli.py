"""`python -m bot memory-check [USER]`: the memory self-check (core_tools/memory/selfcheck.py) now, for one
user or everyone with memories, asking recall for every memory (the nightly check asks for a sample),
one line each; the result is stored as the nightly check stores it (the
bot tells the owner of a fall at its next tick)."""

from __future__ import annotations

import asyncio
import sys

from bot.config.args import parse_user_id
from bot.config.settings import Settings

USAGE = "memory-check: USER must be a Telegram user id (digits), e.g. python -m bot memory-check 111"


def run(settings: Settings, user: str | None) -> int:
    """Check `user` (digits) or every user with memories; 0 when every check ran, 2 on a bad USER."""
    from bot.process.upgrade.errors import UpgradeFailed
    from bot.process.upgrade.start import ensure_schema
    from bot.process.wiring import build_services
    from core_tools.memory.selfcheck import MemorySelfCheck
    from db.engine import make_sessionmaker

    user_id = parse_user_id(user) if user is not None else None
    if user is not None and user_id is None:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        ensure_schema(settings)  # a database behind this code: the checked upgrade first
        services = build_services(settings)
    except UpgradeFailed as exc:  # a database behind this code whose checked upgrade failed
        print(exc.line(), file=sys.stderr)
        return 2
    except ValueError as exc:  # an unusable combination of settings, e.g. a provider without its key
        print(f"Configuration error: {exc}.", file=sys.stderr)
        return 2

    async def go() -> int:
        try:
            check = MemorySelfCheck(services.memory, make_sessionmaker(services.engine))
            users = [user_id] if user_id is not None else await check.users()
            if not users:
                print("No user has memories yet.", flush=True)
            for uid in users:
                print((await check.check_user(uid)).line(), flush=True)
            return 0
        finally:
            await services.aclose()

    return asyncio.run(go())
