"""Which values of a settings object are secret: the log filter masks them (bot/process/logs.py)."""

from __future__ import annotations

import contextlib
from urllib.parse import urlsplit

from pydantic import BaseModel, SecretStr

MIN_SECRET_LEN = 6  # a shorter value would mask ordinary words; `secret_values` reports such settings
SECRET_SUFFIXES = ("_key", "_token", "_secret", "_password")


def secret_values(settings: BaseModel) -> list[str]:
    """Every secret in a settings object: SecretStr fields, *_KEY/*_TOKEN/*_SECRET fields, URL passwords.

    Derived from the class, so a setting added later is masked without anyone remembering to list it.
    """
    values: list[str] = []
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            values.append(value.get_secret_value())
        elif isinstance(value, str) and name.endswith(SECRET_SUFFIXES):
            values.append(value)
        elif value is not None and "@" in str(value):  # a URL with a password: https://user:pw@host/
            with contextlib.suppress(ValueError):  # not a URL after all
                values.append(urlsplit(str(value)).password or "")
    return [v for v in values if v]
