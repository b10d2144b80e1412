"""Bar charts as PNG for the chat (/usage, /codestats), drawn with Pillow.

Imported only when a chart is asked for (bot/adapter/chart_replies.py), never by a plain turn, and run in a
worker thread: drawing is CPU work. A chart's size is bounded by its input (at most a year of bars and a few
series), so a render takes milliseconds. Pillow's own font is used (no system font is needed).
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import dataclass

from PIL import Image, ImageDraw, ImageFont

from core_tools.usage.amounts import fine_usd, tokens_str
from core_tools.usage.series import Buckets, UsageSeries
from db.series import RunPoint

WIDTH = 960
PANEL_HEIGHT = 330
TITLE_HEIGHT = 44
MARGIN_LEFT = 78
MARGIN_RIGHT = 24
GRID_LINES = 4
BACKGROUND = (255, 255, 255)
INK = (33, 37, 41)
GRID = (222, 226, 230)
MUTED = (108, 117, 125)
# Okabe and Ito's palette: told apart with the common kinds of colour blindness.
PALETTE = (
    (0, 114, 178),
    (230, 159, 0),
    (0, 158, 115),
    (204, 121, 167),
    (86, 180, 233),
    (213, 94, 0),
    (240, 228, 66),
    (120, 120, 120),
)

Font = ImageFont.FreeTypeFont | ImageFont.ImageFont


@dataclass(frozen=True)
class Panel:
    """One bar chart: a bar per label, the series stacked in order (each has a value per label)."""

    title: str
    labels: list[str]
    series: dict[str, list[float]]
    value_text: Callable[[float], str]  # an axis value as text ("1.2k", "$0.05")
    colors: dict[str, tuple[int, int, int]] | None = None  # a series' colour, else the palette's next
    counts: bool = False  # whole numbers: the grid lines fall on whole numbers


def _font(size: int) -> Font:
    return ImageFont.load_default(size=size)


def axis(highest: float, counts: bool = False) -> tuple[float, float]:
    """The value axis (top, step) for bars up to `highest`: a step of 1, 2, 2.5 or 5 times a power of ten
    (whole for `counts`) giving at most GRID_LINES lines above zero."""
    if highest <= 0:
        return (float(GRID_LINES), 1.0) if counts else (1.0, 0.25)
    raw = highest / GRID_LINES
    step = 10.0 ** math.floor(math.log10(raw))
    for multiple in (1.0, 2.0, 2.5, 5.0, 10.0):
        if multiple * step >= raw * (1 - 1e-9):
            step *= multiple
            break
    if counts:
        step = float(max(1, math.ceil(step)))
    return math.ceil(highest / step - 1e-9) * step, step


def _colors(panel: Panel) -> dict[str, tuple[int, int, int]]:
    chosen = dict(panel.colors or {})
    free = [c for c in PALETTE if c not in chosen.values()]
    for name in panel.series:
        if name not in chosen:
            chosen[name] = free.pop(0) if free else PALETTE[-1]
    return chosen


def _legend(draw: ImageDraw.ImageDraw, panel: Panel, colors: dict[str, tuple[int, int, int]], y: int) -> int:
    """Draw the legend in rows from `y`; returns the y below it."""
    font = _font(13)
    x = MARGIN_LEFT
    for name in panel.series:
        width = 14 + 6 + int(draw.textlength(name, font=font)) + 18
        if x + width > WIDTH - MARGIN_RIGHT and x > MARGIN_LEFT:
            x, y = MARGIN_LEFT, y + 20
        draw.rectangle((x, y + 2, x + 12, y + 14), fill=colors[name])
        draw.text((x + 18, y), name, fill=INK, font=font)
        x += width
    return y + 24


def _panel(draw: ImageDraw.ImageDraw, panel: Panel, top: int) -> None:
    colors = _colors(panel)
    draw.text((MARGIN_LEFT, top), panel.title, fill=INK, font=_font(16))
    plot_top = _legend(draw, panel, colors, top + 26) + 6
    plot_bottom = top + PANEL_HEIGHT - 34
    plot_left, plot_right = MARGIN_LEFT, WIDTH - MARGIN_RIGHT
    n = max(1, len(panel.labels))
    totals = [sum(values[i] for values in panel.series.values()) for i in range(len(panel.labels))]
    top_value, step = axis(max(totals, default=0.0), panel.counts)
    small = _font(12)
    height = plot_bottom - plot_top
    for k in range(round(top_value / step) + 1):
        value = step * k
        y = plot_bottom - round(height * value / top_value)
        draw.line((plot_left, y, plot_right, y), fill=GRID if k else MUTED, width=1)
        label = panel.value_text(value)
        draw.text((plot_left - 8 - draw.textlength(label, font=small), y - 7), label, fill=MUTED, font=small)
    slot = (plot_right - plot_left) / n
    bar = max(1.0, slot * 0.72)
    # Every label when they fit; else every k-th, so they never run into each other.
    widest = max((draw.textlength(label, font=small) for label in panel.labels), default=0.0)
    every = max(1, math.ceil((widest + 8) / slot))
    for i, label in enumerate(panel.labels):
        x0 = plot_left + slot * i + (slot - bar) / 2
        base = float(plot_bottom)
        for name, values in panel.series.items():
            if values[i] <= 0:
                continue
            h = height * values[i] / top_value
            draw.rectangle(
                (round(x0), round(base - h), round(x0 + bar) - 1, round(base) - 1), fill=colors[name]
            )
            base -= h
        if i % every == 0:
            w = draw.textlength(label, font=small)
            draw.text(
                (plot_left + slot * i + slot / 2 - w / 2, plot_bottom + 6), label, fill=MUTED, font=small
            )


def render(title: str, panels: list[Panel], note: str | None = None) -> bytes:
    """The panels one under another, under a title (and above a note), as PNG bytes."""
    height = TITLE_HEIGHT + PANEL_HEIGHT * len(panels) + (26 if note else 8)
    image = Image.new("RGB", (WIDTH, height), BACKGROUND)
    draw = ImageDraw.Draw(image)
    draw.text((MARGIN_LEFT, 12), title, fill=INK, font=_font(20))
    for i, panel in enumerate(panels):
        _panel(draw, panel, TITLE_HEIGHT + PANEL_HEIGHT * i)
    if note:
        draw.text((MARGIN_LEFT, height - 22), note, fill=MUTED, font=_font(12))
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


# ---------------------------------------------------------------- the charts of the commands

SUCCEEDED = "succeeded"
GREEN = (0, 158, 115)
MAX_CATEGORIES = 5


def usage_png(series: UsageSeries, title: str) -> bytes:
    """/usage's chart: tokens per purpose and estimated cost per model, a bar per day (or hour)."""
    unit = series.buckets.unit
    labels = series.buckets.labels()
    panels = [
        Panel(
            f"Tokens per {unit}, by purpose",
            labels,
            {k: [float(v) for v in vs] for k, vs in series.tokens_by_purpose.items()},
            tokens_str,
        ),
        Panel(f"Estimated cost per {unit}, by model", labels, dict(series.cost_by_model), fine_usd),
    ]
    note = None
    if series.unpriced_models:
        note = f"No price for {', '.join(series.unpriced_models)}: not in the cost chart (see LLM_PRICES)."
    return render(title, panels, note)


def code_runs_png(buckets: Buckets, runs: list[RunPoint], title: str) -> bytes:
    """/codestats' chart: code runs per day, succeeded and failed by error category."""
    n = len(buckets.starts)
    by: dict[str, list[float]] = {}
    for run in runs:
        i = buckets.index(run.at)
        if i is None:
            continue
        name = SUCCEEDED if run.success else f"failed: {run.error_category or 'unknown'}"
        by.setdefault(name, [0.0] * n)[i] += 1
    failures = sorted((k for k in by if k != SUCCEEDED), key=lambda k: (-sum(by[k]), k))
    series = {SUCCEEDED: by.get(SUCCEEDED, [0.0] * n)}
    series.update({k: by[k] for k in failures[:MAX_CATEGORIES]})
    if len(failures) > MAX_CATEGORIES:
        rest = [by[k] for k in failures[MAX_CATEGORIES:]]
        series["failed: other"] = [sum(col) for col in zip(*rest, strict=True)]
    panel = Panel(
        f"Code runs per {buckets.unit}, by outcome",
        buckets.labels(),
        series,
        lambda v: f"{v:.0f}",
        colors={SUCCEEDED: GREEN},
        counts=True,
    )
    return render(title, [panel])
