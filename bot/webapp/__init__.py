"""The Mini App: a page in Telegram where each user sees and steers what the assistant knows, plans, spends.

- `auth`: Telegram's signed init data, checked as the Bot API documents it (and signed, for tests and links);
- `server`: the aiohttp server in the bot process (the page, its assets, security headers, limits);
- `api`: the JSON API, over the same services the chat commands use; `views` shapes its answers;
- `limits`: the per-user request limit; `telegram`: the menu button and /app; `link`: a signed local link;
- `static/`: the page (plain ES modules, no build step, nothing loaded from elsewhere).

Only `telegram` and `link` are imported when the app is off: aiohttp's server is imported when it starts.
"""
