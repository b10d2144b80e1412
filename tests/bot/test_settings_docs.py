"""`.env.example` documents every setting, and the documented defaults are the real ones."""

from __future__ import annotations

from pathlib import Path

from bot.config.settings import Settings

EXAMPLE = Path(__file__).resolve().parents[2] / ".env.example"


def test_env_example_lists_every_setting_and_nothing_else() -> None:
    documented = {
        line.split("=", 1)[0].strip()
        for line in EXAMPLE.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    }
    assert documented == {name.upper() for name in Settings.model_fields}


def test_the_example_file_loads_as_documented(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    text = EXAMPLE.read_text()
    text = text.replace("TELEGRAM_BOT_TOKEN=\n", "TELEGRAM_BOT_TOKEN=123:abc\n")
    text = text.replace("OPENAI_API_KEY=\n", "OPENAI_API_KEY=sk-x\n").replace(
        "ALLOWED_USER_IDS=\n", "ALLOWED_USER_IDS=5,6\n"
    )
    env.write_text(text)
    s = Settings(_env_file=env)  # type: ignore[call-arg]
    assert s.allowed_user_ids == [5, 6] and s.owner_id == 5
    assert s.searxng_url in (None, "") and s.search_provider == ""
