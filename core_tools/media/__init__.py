"""Media in and out: storage of users' files, text extraction, images for the model (no Telegram here).

The service's names are loaded on first use: the reading worker (core_tools.media.worker) imports only the
parsers, not the database layer, so that it starts fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Eager (light: the parsers load inside it on first use), and so the name `extract` is the function, not
# the submodule of the same name.
from core_tools.media.extract import SUPPORTED, Extracted, extract

if TYPE_CHECKING:
    from core_tools.media.service import MediaConfig, MediaService, safe_name

__all__ = ["SUPPORTED", "Extracted", "MediaConfig", "MediaService", "extract", "safe_name"]

_LAZY = frozenset({"MediaConfig", "MediaService", "safe_name"})


def __getattr__(name: str) -> Any:
    """A name of the service module, imported on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.service"), name)
