"""Media in and out: storage of users' files, text extraction, images for the model (no Telegram here)."""

from __future__ import annotations

from core_tools.media.extract import SUPPORTED, Extracted, extract
from core_tools.media.service import MediaConfig, MediaService, safe_name

__all__ = ["SUPPORTED", "Extracted", "MediaConfig", "MediaService", "extract", "safe_name"]
