"""What an operator is told to put in each setting that is missing or wrong
(bot/process/setting_errors.py)."""

from __future__ import annotations

# What to tell an operator for each setting that is missing or wrong: one line, no traceback.
HINTS: dict[str, str] = {
    "TELEGRAM_BOT_TOKEN": "put the token @BotFather gave you (looks like 123456:ABC-DEF...)",
    "TELEGRAM_API_BASE_URL": "leave it unset for the public Bot API, or give e.g. http://localhost:8081/bot",
    "ALLOWED_USER_IDS": "comma-separated numeric Telegram user ids, e.g. 12345678,87654321 "
    "(leave it empty and message the bot: it replies with your id)",
    "OPENAI_API_KEY": "the API key of your OpenAI-compatible endpoint (any text for a local server)",
    "OPENAI_BASE_URL": "an OpenAI-compatible base URL, e.g. https://api.openai.com/v1 or http://localhost:11434/v1",
    "TELEGRAM_WEBHOOK_URL": "the public https:// URL Telegram posts updates to, or empty for polling",
    "TELEGRAM_WEBHOOK_PORT": "the port the bot listens on for webhook updates, e.g. 8080",
    "CODE_SANDBOX_SOCKET": "the sandbox service's unix socket, e.g. /run/sandbox/sandbox.sock",
    "CODE_SANDBOX_URLS": "comma-separated sandbox services, e.g. tcp://sandbox1:8700,tcp://sandbox2:8700",
    "LLM_MODEL": "the model name your endpoint serves, e.g. gpt-4o-mini or llama3.1",
    "DATABASE_URL": "an SQLAlchemy URL, e.g. sqlite:///data/assistant.db or postgresql+psycopg://u:pw@host/db",
    "DEFAULT_TIMEZONE": "an IANA time zone such as Europe/Berlin",
    "SEARCH_PROVIDER": "a comma-separated list of searxng, brave, tavily, duckduckgo (or leave it empty)",
    "SEARXNG_URL": "the base URL of your SearXNG, e.g. http://searxng:8080",
    "SESSION_AUTO_DIVIDE": "daily, weekly or none",
    "OWNER_USER_ID": "the owner's numeric Telegram user id, or empty for the first of ALLOWED_USER_IDS",
    "BUDGET_DAILY_USD": "a non-negative amount of US dollars such as 1.50, or empty for no cap",
    "BUDGET_MONTHLY_USD": "a non-negative amount of US dollars such as 20, or empty for no cap",
    "BUDGET_DAILY_TOKENS": "a whole number of tokens such as 200000, or empty for no cap",
    "BUDGET_MONTHLY_TOKENS": "a whole number of tokens such as 3000000, or empty for no cap",
    "LLM_PRICES": "JSON: model -> [input, output] or [input, output, cached_input] USD per million tokens",
    "SESSION_ROLLOVER_TIME": "a local time of day such as 04:00",
    "ALLOWED_CHAT_IDS": "comma-separated numeric group chat ids, e.g. -1001234567890 (the bot tells a "
    "group its id when mentioned there)",
    "LLM_MODELS": "comma-separated model names your endpoint serves; the first is the default",
    "CODE_PYTHON_ENV": "put a directory of its own, e.g. /opt/assistant-sandbox, or leave it empty for no "
    "data toolkit",
    "BACKUP_SCHEDULE": "a 5-field cron expression in the owner's time zone, e.g. 30 3 * * * (03:30 daily), "
    "or empty for no scheduled backups",
    "BACKUP_AGE_RECIPIENTS": "age public keys (age1..., comma-separated) or the path of a file of them, as "
    "`age-keygen -y key.txt` prints them; empty: backups are not encrypted",
    "MESSAGE_DEBOUNCE_MS": "milliseconds to wait for more messages before answering, e.g. 1500 (0: at once)",
    "WEBAPP_LISTEN": "HOST:PORT the app's web server listens on, e.g. 127.0.0.1:8090 (empty: no app)",
    "WEBAPP_URL": "the public https:// address your reverse proxy serves the app at, e.g. https://bot.example.com/app/",
}
