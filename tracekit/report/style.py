"""How the report draws things: colours, labels, lane positions and hover text.

Shared by the figures (``figures.py``) and the page script's data (``lod.py``), which must draw
the same timeline. Every string from a trace that plotly shows goes through ``esc``: plotly
renders a few HTML tags in labels and hover text, and turns entities back into characters, so
escaped names show as the text they are.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from tracekit.report.timeline import EXPOSED, OVERLAP, PHASE, STEP, Timeline

SERIES_LABELS = {
    STEP: "step",
    PHASE: "phase",
    "compute": "compute",
    "comm": "communication",
    "memory": "memory copy/set",
    "sync": "sync",
    "other": "host collective call",
    OVERLAP: "comm overlapping compute",
    EXPOSED: "exposed comm (nothing hides it)",
}
SERIES_COLORS = {
    STEP: "#BAB0AC",
    PHASE: "#72B7B2",
    "compute": "#4C78A8",
    "comm": "#E45756",
    "memory": "#9D9D9D",
    "sync": "#D8B5A5",
    "other": "#FF9DA6",
    OVERLAP: "#54A24B",
    EXPOSED: "#9E1B32",
}
PHASE_COLORS = {
    "forward": "#72B7B2",
    "backward": "#F58518",
    "allreduce": "#EECA3B",
    "optimizer": "#B279A2",
}
OTHER_PHASE_COLORS = ("#9D755D", "#8CD17D", "#B6992D", "#499894", "#D37295", "#86BCB6")
BREAKDOWN_COLORS = {
    "compute_only_ms": "#4C78A8",
    "overlapped_ms": "#54A24B",
    "exposed_comm_ms": "#E45756",
    "other_ms": "#9D9D9D",
    "idle_ms": "#E0E0E0",
}
LANE_HEIGHT_PX = 22
RANK_GAP = 0.6  # extra lanes of space between ranks
BAR_WIDTH = 0.8  # of a lane
MIN_BUSY_HEIGHT = 0.08  # of a full bar: a merged block drawn busy/span high, never below this
NAME_CHARS = 140  # longer names are cut in hover text (kernel tables show them whole)


def esc(text: object) -> str:
    """Text for a plotly label: HTML-escaped, so tags in names show as text, and encodable."""
    return html.escape(encodable(str(text)), quote=False)


def encodable(text: str) -> str:
    """``text`` with lone surrogates (from ``\\ud800`` escapes in a trace's JSON, or a file
    name that is not UTF-8), which UTF-8 cannot encode, replaced by U+FFFD; every other
    character kept."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def short(text: str, limit: int = NAME_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


KERNEL_NAME_CHARS = 72  # kernel names in tables are cut to this (the full name on hover)


def short_kernel_name(name: str, limit: int = KERNEL_NAME_CHARS) -> str:
    """A C++ kernel name as a table shows it: no return type, template arguments as ``<…>``,
    no parameter list, at most ``limit`` characters. ``void at::native::vectorized_elementwise_
    kernel<4, at::native::FillFunctor<float>, ...>(int, ...)`` becomes
    ``at::native::vectorized_elementwise_kernel<…>``."""
    text = str(name).strip()
    text = text.removeprefix("void ")
    out: list[str] = []
    depth = 0
    for char in text:  # one pass: drop what is inside <...> (nested)
        if char == "<":
            if depth == 0:
                out.append("<…>")
            depth += 1
        elif char == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(char)
    shortened = "".join(out).strip()
    opening = _parameters_start(shortened)
    if opening > 0 and not shortened[opening - 1].isspace():  # "f(int)", not "Memcpy (...)"
        shortened = shortened[:opening]
    return short(shortened or text, limit)


def _parameters_start(text: str) -> int:
    """Index of the ``(`` that opens the balanced group ending ``text``; -1 when none."""
    if not text.endswith(")"):
        return -1
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return -1


def lane_positions(timeline: Timeline) -> np.ndarray:
    """The y of each lane: one apart, with a gap between ranks (top to bottom)."""
    ranks = np.array([lane.rank for lane in timeline.lanes])
    if ranks.size == 0:
        return np.empty(0)
    changes = np.concatenate([[0], np.cumsum(ranks[1:] != ranks[:-1])])
    return np.arange(ranks.size) + RANK_GAP * changes


def phase_color(name: str, code: int) -> str:
    """Colour of a phase: fixed for the workloads' phases, else picked by its code."""
    key = name.strip("# ").lower()
    return PHASE_COLORS.get(key, OTHER_PHASE_COLORS[code % len(OTHER_PHASE_COLORS)])


def name_colors(timeline: Timeline) -> list[str | None]:
    """Per name code: the colour of phase and step bars with that name (None otherwise)."""
    seg = timeline.segments
    phase_codes = set(seg.loc[seg["series"] == PHASE, "name"].unique().tolist())
    return [phase_color(n, i) if i in phase_codes else None for i, n in enumerate(timeline.names)]


def hover_names(timeline: Timeline) -> list[str]:
    """Names as hover text shows them: cut to NAME_CHARS and escaped."""
    return [esc(short(n)) for n in timeline.names]


def lane_labels(timeline: Timeline) -> list[str]:
    return [esc(lane.label) for lane in timeline.lanes]


def durations(ns: np.ndarray) -> np.ndarray:
    """Durations as text with a unit that suits each (ns, µs, ms, s)."""
    v = np.asarray(ns, dtype=float)
    return np.where(
        v < 1e3,
        np.char.mod("%.0f ns", v),
        np.where(
            v < 1e6,
            np.char.mod("%.2f µs", v / 1e3),
            np.where(v < 1e9, np.char.mod("%.3f ms", v / 1e6), np.char.mod("%.3f s", v / 1e9)),
        ),
    ).astype(object)


def hover_text(blocks: pd.DataFrame, timeline: Timeline) -> pd.Series:
    """Hover text of each block (``timeline.view`` rows): a kernel's name, duration, kind,
    lane (stream), step and phase; for a merged block, how many intervals it holds."""
    if blocks.empty:
        return pd.Series([], dtype=object)
    names = np.array([*hover_names(timeline), ""], dtype=object)
    labels = np.array(lane_labels(timeline), dtype=object)
    series = blocks["series"].astype(str)
    kind = series.map(SERIES_LABELS).to_numpy(dtype=object)
    name = names[blocks["name"].to_numpy(np.int64)]
    phase = names[blocks["phase"].to_numpy(np.int64)]  # -1 picks the trailing ""
    phase = np.where(phase == "", "—", phase)
    lane = labels[blocks["lane"].to_numpy(np.int64)]
    step = _steps(blocks["step"].to_numpy(np.int64))
    start = blocks["start_ns"].to_numpy(np.int64)
    end = blocks["end_ns"].to_numpy(np.int64)
    at = np.char.mod("%.3f", start / 1e6).astype(object)
    single = (
        "<b>" + name + "</b><br>" + durations(end - start) + " · " + kind + "<br>" + lane
        + "<br>step " + step + " · phase " + phase + "<br>at " + at + " ms"
    )  # fmt: skip
    lo = _steps(blocks["step_lo"].to_numpy(np.int64))
    hi = _steps(blocks["step_hi"].to_numpy(np.int64))
    steps = np.where(lo == hi, "step " + lo, "steps " + lo + "–" + hi)
    merged = (
        "<b>" + blocks["count"].astype(str).to_numpy(dtype=object) + " × " + kind
        + " merged at this zoom</b><br>busy " + durations(blocks["busy_ns"].to_numpy())
        + " of " + durations(end - start) + " (" + busy_pct(blocks) + ")<br>longest: " + name
        + "<br>" + lane
        + "<br>" + steps + " · from " + at + " ms"
    )  # fmt: skip
    return pd.Series(np.where(blocks["count"].to_numpy() > 1, merged, single), index=blocks.index)


def busy_pct(blocks: pd.DataFrame) -> np.ndarray:
    """The busy share of each block's span, as text ("12%")."""
    span = (blocks["end_ns"] - blocks["start_ns"]).to_numpy(np.int64).astype(float)
    busy = blocks["busy_ns"].to_numpy(np.int64).astype(float)
    share = np.divide(100 * busy, span, out=np.full(span.size, 100.0), where=span > 0)
    return np.char.mod("%.0f%%", share).astype(object)


def bar_heights(blocks: pd.DataFrame) -> np.ndarray:
    """How high each block is drawn (lane units): a full bar times the share of its span that
    is busy, so a merged block's area is its busy time (at least MIN_BUSY_HEIGHT of a bar)."""
    span = (blocks["end_ns"].to_numpy(np.int64) - blocks["start_ns"].to_numpy(np.int64)).astype(
        float
    )
    busy = blocks["busy_ns"].to_numpy(np.int64).astype(float)
    share = np.divide(busy, span, out=np.ones(span.size), where=span > 0)
    return BAR_WIDTH * np.clip(share, MIN_BUSY_HEIGHT, 1.0)


def _steps(step: np.ndarray) -> np.ndarray:
    return np.where(step >= 0, step.astype(str), "—").astype(object)
