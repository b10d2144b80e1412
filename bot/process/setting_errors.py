"""What an operator is told when settings do not load: one line per bad variable (what is wrong, what to
put there, its default), never the value itself, and the settings with the bad ones at their defaults so
that every other check still runs and every problem is reported at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args, get_origin

from pydantic import ValidationError

from bot.config.hints import HINTS
from bot.config.settings import Settings


def describe_errors(err: ValidationError) -> list[str]:
    """One line per bad setting: the variable, what is wrong, what to put there. Never the value itself."""
    lines, seen = [], set()
    for e in err.errors(include_url=False):
        field = str(e["loc"][0]) if e["loc"] else "?"
        if field in seen:  # one line per variable: a union type reports each of its members
            continue
        seen.add(field)
        lines.append(
            f"Configuration error: {field.upper()} {_problem(e, field)}: {hint_for(field)}{_default(field)}."
        )
    return lines


def bad_fields(err: ValidationError) -> set[str]:
    """The settings a ValidationError is about."""
    return {str(e["loc"][0]) for e in err.errors(include_url=False) if e["loc"]}


def _problem(e: Mapping[str, Any], field: str) -> str:
    """What is wrong, in plain words: "is missing" for an unset or empty required value."""
    info = Settings.model_fields.get(field)
    given = e.get("input")
    empty = e["type"] == "missing" or (isinstance(given, str) and not given.strip())
    if empty:
        return "is missing" if info is None or info.is_required() else "is empty"
    ctx = e.get("ctx") or {}
    kind = e["type"]
    if kind == "value_error":  # our own validators' sentences
        return f"is invalid ({str(ctx.get('error', e['msg'])).removeprefix('Value error, ')})"
    words = {
        "int_parsing": "is not a whole number",
        "int_from_float": "is not a whole number",
        "int_type": "is not a whole number",
        "float_parsing": "is not a number",
        "float_type": "is not a number",
        "bool_parsing": "is neither true nor false",
        "bool_type": "is neither true nor false",
        "literal_error": "is none of the allowed values",
        "url_parsing": "is not a URL",
        "url_scheme": "is not an http:// or https:// URL",
        "url_type": "is not a URL",
        "time_parsing": "is not a time of day",
        "time_type": "is not a time of day",
        "string_too_short": "is too short",
        "greater_than_equal": f"is below {ctx.get('ge')}",
        "greater_than": f"is not above {ctx.get('gt')}",
        "less_than_equal": f"is above {ctx.get('le')}",
        "less_than": f"is not below {ctx.get('lt')}",
    }
    return words.get(kind, "is invalid")


def hint_for(field: str) -> str:
    """What to put in a setting: its hint, else its type and range (and its default)."""
    var = field.upper()
    if var in HINTS:
        return HINTS[var]
    info = Settings.model_fields.get(field)
    if info is None:
        return "see .env.example"
    kind = info.annotation
    choices = get_args(kind) if get_origin(kind) is Literal else ()
    if choices:
        what = "one of " + ", ".join(str(c) for c in choices)
    elif kind is bool:
        what = "true or false"
    elif kind in (int, float):
        # pydantic keeps Field(ge=..., gt=..., le=...) as annotated-types objects of those names
        low = next((m.ge for m in info.metadata if hasattr(m, "ge")), None)
        above = next((m.gt for m in info.metadata if hasattr(m, "gt")), None)
        high = next((m.le for m in info.metadata if hasattr(m, "le")), None)
        what = "a whole number" if kind is int else "a number"
        if low is not None and high is not None:
            what += f" from {low} to {high}"
        elif low is not None:
            what += f" of at least {low}"
        else:
            bounds = [f"above {above}"] if above is not None else []
            bounds += [f"at most {high}"] if high is not None else []
            what += " " + " and ".join(bounds) if bounds else ""
    else:
        return "see .env.example"
    return f"put {what}"


def _default(field: str) -> str:
    """ " (or delete the line: DEFAULT)" for a setting with a default worth naming."""
    info = Settings.model_fields.get(field)
    if info is None or info.is_required() or info.default in (None, "", []):
        return ""
    shown = str(info.default).lower() if isinstance(info.default, bool) else info.default
    return f" (or delete the line: {shown})"


def settings_without(fields: set[str]) -> Settings | None:
    """The settings with these (bad) ones at their defaults: what the other checks run on, so that every
    problem is reported at once; None when even that does not load."""
    values: dict[str, Any] = {}
    for name in fields:
        info = Settings.model_fields.get(name)
        if info is None:
            continue
        values[name] = "placeholder" if info.is_required() else info.get_default(call_default_factory=True)
    try:
        return Settings(**values)
    except ValidationError as err:
        # A default that does not hold here either (CODE_PYTHON_ENV's default in an unsafe place): empty.
        again = {name: "" for name in bad_fields(err) if name in values and isinstance(values[name], str)}
    try:
        return Settings(**{**values, **again}) if again else None
    except ValidationError:
        return None
