"""The price table (per model, USD per million tokens or per minute of audio) and the cost of usage rows.

Costs are estimated at read time from this table, so a corrected price also corrects past figures. A model
with no price shows as "unknown" and adds nothing to a cost cap; give it a price in LLM_PRICES, or use a
token cap, to bound it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from db.usage import ModelUsage


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
