"""Checking a tool's arguments against a JSON schema we did not write (an MCP server's), in bounded time.

jsonschema matches `pattern` and `patternProperties` with Python's `re`, which backtracks: a server's
`^(a+)+$` against "aaaa...a!" held the event loop for seconds, and `re` holds the GIL while it matches,
so a worker thread alone does not help. Here every regular expression of the schema is matched with RE2
(linear time; a pattern RE2 cannot compile, such as one with a look-around, is not checked: the server
checks its own arguments), `uniqueItems` is checked by hashing instead of comparing every pair, and
every keyword checks a deadline, so a schema that would take long (nested `anyOf` with `$ref`) stops
with an error. The check runs in a worker thread (`check_arguments`).
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import re2
from jsonschema.exceptions import ValidationError

# The most seconds one check of a tool's arguments may take.
CHECK_SECONDS = 2.0

Schema = dict[str, Any]
Errors = Iterator[ValidationError]
Keyword = Callable[[Any, Any, Any, Schema], Errors | None]


class CheckTimeout(Exception):
    """The arguments could not be checked against the schema within its time."""


_deadline = threading.local()


@functools.lru_cache(maxsize=2048)
def _regex(pattern: str) -> Any | None:
    """The RE2 form of a pattern; None when RE2 cannot compile it (it is then not checked)."""
    try:
        return re2.compile(pattern)
    except re2.error:
        return None


def _search(pattern: str, text: str) -> bool:
    rx = _regex(pattern)
    return True if rx is None else rx.search(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Schema) -> Errors:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance[:80]!r} does not match {pattern[:80]!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any, schema: Schema) -> Errors:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Schema) -> Errors:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [k for k in instance if k not in properties and not any(_search(p, k) for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        names = ", ".join(repr(e)[:80] for e in extras[:5])
        verb = "was" if len(extras) == 1 else "were"
        yield ValidationError(f"Additional properties are not allowed ({names} {verb} unexpected)")


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Schema) -> Errors:
    # By canonical JSON text: linear, where jsonschema compares every pair of objects. (1 and 1.0 count as
    # different here: a duplicate of that kind is left for the server to refuse.)
    if unique and validator.is_type(instance, "array"):
        seen = {json.dumps(item, sort_keys=True, default=str) for item in instance}
        if len(seen) < len(instance):
            yield ValidationError("the array has non-unique elements")


def _unevaluated_properties(validator: Any, value: Any, instance: Any, schema: Schema) -> Errors:
    # jsonschema's own check matches patternProperties with `re`; not checked here (the server checks).
    return iter(())


def _timed(keyword: Keyword) -> Keyword:
    def check(validator: Any, value: Any, instance: Any, schema: Schema) -> Errors:
        if time.monotonic() > getattr(_deadline, "at", float("inf")):
            raise CheckTimeout
        yield from keyword(validator, value, instance, schema) or ()

    return check


_OWN: dict[str, Keyword] = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items,
    "unevaluatedProperties": _unevaluated_properties,
}


def bounded_validator(schema: dict[str, Any]) -> Any:
    """A validator of `schema` (its own draft, 2020-12 by default) with the bounds described above."""
    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    keywords = {k: _timed(_OWN.get(k, v)) for k, v in base.VALIDATORS.items()}
    keywords.update({k: _timed(v) for k, v in _OWN.items() if k not in keywords})
    cls = jsonschema.validators.extend(base, keywords)
    return cls(schema)


def check_arguments(validator: Any, arguments: dict[str, Any], seconds: float = CHECK_SECONDS) -> list[str]:
    """The problems of `arguments` (at most five, as 'path: message'); raise CheckTimeout past `seconds`.

    Blocking CPU work: call it in a worker thread.
    """
    _deadline.at = time.monotonic() + seconds
    try:
        problems = []
        for error in validator.iter_errors(arguments):
            problems.append(error)
            if len(problems) >= 5:
                break
    finally:
        _deadline.at = float("inf")
    problems.sort(key=lambda e: [str(p) for p in e.absolute_path])
    return [f"{'.'.join(str(p) for p in e.absolute_path) or 'arguments'}: {e.message}" for e in problems]
