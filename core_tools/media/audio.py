"""How long a recording really is: what its transcription is bounded, reserved and accounted by.

Telegram's `duration` is what the sender's client declared: a crafted voice note declares 1 s and carries
hours. The length used is the largest of the declared one, the one found in the file (an OGG/Opus
stream's packets counted as a decoder plays them; other formats as mutagen reads their headers) and the
file's size at the highest bitrate the kind of recording has, a floor no crafted header can lower.
"""

from __future__ import annotations

import io
import logging
import math
from dataclasses import dataclass

log = logging.getLogger(__name__)

MAX_AUDIO_BPS = 320_000  # compressed audio at most (MP3's top bitrate); Telegram's voice notes use ~32k
MAX_VIDEO_NOTE_BPS = 4_000_000  # a round video is mostly picture: its size says less about its sound
MAX_PCM_BPS = 12_288_000  # uncompressed audio as its header says, at most 8 channels of 48 kHz 32-bit
_LOSSLESS = frozenset({"WAVE", "AIFF", "FLAC"})  # whose header tells the raw bitrate the decoder plays

OPUS_RATE = 48_000  # Opus counts its samples at 48 kHz whatever the input rate was
_MAX_PACKET = 5_760  # 120 ms: no Opus packet lasts longer (RFC 6716, 3.2.5)


@dataclass(frozen=True)
class AudioLength:
    """A recording's length: `seconds` is the bound checked against VOICE_MAX_SECONDS and accounted."""

    seconds: int
    declared: int
    found: float | None  # what the file itself says, None when it could not be read
    at_least: bool = False  # counting stopped past `stop_after`: the recording is longer still

    @property
    def understated(self) -> bool:
        """The sender's client declared less than the recording holds."""
        return self.seconds > self.declared


def audio_length(data: bytes, declared: float, kind: str, stop_after: float | None = None) -> AudioLength:
    """The length of a recording of `kind` (voice, audio, video_note): the largest of the declared, the
    found and the size-based length. `stop_after`: counting may stop once the length passes it.

    Pure Python over up to 20 MB: call it off the event loop."""
    found, stopped = _opus_seconds(data, stop_after)
    ceiling = MAX_VIDEO_NOTE_BPS if kind == "video_note" else MAX_AUDIO_BPS
    if found is None:
        found, raw_bps = _header_seconds(data)
        if raw_bps:
            ceiling = max(ceiling, min(raw_bps, MAX_PCM_BPS))
    floor = len(data) * 8 / ceiling
    seconds = max(float(declared), found or 0.0, floor)
    return AudioLength(math.ceil(seconds), max(0, round(declared)), found, stopped and seconds == found)


def _header_seconds(data: bytes) -> tuple[float | None, int]:
    """(length, raw bitrate of a lossless format or 0) as mutagen reads them from the file's headers."""
    import mutagen

    try:
        parsed = mutagen.File(io.BytesIO(data))
    except Exception as exc:  # a damaged or unknown file: the declared and size-based lengths remain
        log.info("no length in the recording (%s)", type(exc).__name__)
        return None, 0
    info = getattr(parsed, "info", None)
    length = getattr(info, "length", None)
    seconds = float(length) if isinstance(length, int | float) and math.isfinite(length) else None
    raw_bps = 0
    if parsed is not None and type(parsed).__name__ in _LOSSLESS:
        raw_bps = (
            int(getattr(info, "channels", 0) or 0)
            * int(getattr(info, "sample_rate", 0) or 0)
            * int(getattr(info, "bits_per_sample", 0) or 0)
        )
    return seconds, raw_bps


def _opus_seconds(data: bytes, stop_after: float | None) -> tuple[float | None, bool]:
    """The length of the Opus stream of an OGG file, its audio packets counted (None when it is not one),
    and whether counting stopped past `stop_after`.

    The granule position of the last page, which players show, is the sender's to write: the packets are
    what a decoder (and so a transcription service) plays. The larger of the two is taken."""
    if not data.startswith(b"OggS"):
        return None, False
    stream: int | None = None
    samples = packet = 0  # 48 kHz samples of the packets so far; the index of the packet being read
    starts = True  # whether the next segment begins a packet
    last_granule = pre_skip = 0
    pos, size = 0, len(data)
    limit = None if stop_after is None else stop_after * OPUS_RATE
    stopped = False
    while pos + 27 <= size and data[pos : pos + 4] == b"OggS":
        segments = data[pos + 26]
        body = pos + 27 + segments
        lacing = data[pos + 27 : body]
        serial = int.from_bytes(data[pos + 14 : pos + 18], "little")
        if stream is None and data[pos + 5] & 0x02 and data[body : body + 8] == b"OpusHead":
            stream = serial
            pre_skip = int.from_bytes(data[body + 10 : body + 12], "little")
        if serial == stream:
            granule = int.from_bytes(data[pos + 6 : pos + 14], "little", signed=True)
            last_granule = max(last_granule, granule)
            offset = body
            for lace in lacing:
                if starts and packet >= 2 and lace:  # packets 0 and 1 are OpusHead and OpusTags
                    samples += _packet_samples(data, offset, lace)
                starts = lace < 255
                packet += starts
                offset += lace
            if limit is not None and samples > limit:
                stopped = True
                break
        pos = body + sum(lacing)
    if stream is None:
        return None, False
    return max(samples, last_granule - pre_skip) / OPUS_RATE, stopped


def _packet_samples(data: bytes, offset: int, length: int) -> int:
    """The 48 kHz samples one Opus packet decodes to, from its TOC byte (RFC 6716, 3.1)."""
    toc = data[offset]
    config = toc >> 3
    if config < 12:  # SILK: 10, 20, 40, 60 ms
        frame = (480, 960, 1920, 2880)[config & 3]
    elif config < 16:  # hybrid: 10, 20 ms
        frame = (480, 960)[config & 1]
    else:  # CELT: 2.5, 5, 10, 20 ms
        frame = (120, 240, 480, 960)[config & 3]
    code = toc & 3
    if code == 0:
        frames = 1
    elif code in (1, 2):
        frames = 2
    else:  # the frame count is in the next byte
        frames = data[offset + 1] & 0x3F if length >= 2 else 0
    return min(frames * frame, _MAX_PACKET)
