"""Media in and out: storage of users' files, text extraction, images for the model (no Telegram here).

The names are loaded on first use: the reading worker (core_tools.media.worker) imports only the parsers,
not the database layer, so that it starts fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core_tools.media.extract import SUPPORTED, Extracted, extract
    from core_tools.media.service import MediaConfig, MediaService, safe_name

__all__ = ["SUPPORTED", "Extracted", "MediaConfig", "MediaService", "extract", "safe_name"]

_HOMES = {
    "SUPPORTED": "extract",
    "Extracted": "extract",
    "extract": "extract",
    "MediaConfig": "service",
    "MediaService": "service",
    "safe_name": "service",
}


def __getattr__(name: str) -> Any:
    """A public name of the package, imported from its module on first use."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
