"""Usage and cost control: prices, caps and their periods, reservations of requests in flight, the service.

- `prices`: the price table and the estimated cost of usage rows;
- `caps`: default caps, calendar period windows, a cap's status;
- `reservations`: the ledger of what requests in flight hold against the caps;
- `amounts`: how money, tokens and resets read in a message;
- `service`: `UsageService`, the budget gate and the owner's view.

The chat-facing reports (/usage, /budget) are worded in bot/texts/usage_report.py.
"""

from core_tools.usage.caps import Caps
from core_tools.usage.prices import parse_prices
from core_tools.usage.service import UsageService

# What the bot's wiring and settings import from the package.
__all__ = ["Caps", "UsageService", "parse_prices"]
