"""A timeline's every interval, packed for the page script that redraws it on zoom.

The figure holds the blocks of the initial view; this payload holds all intervals, so that
zooming in shows each kernel. Per lane and series, each column is a little-endian integer array
of the smallest 8/16/32-bit type that holds it; starts are differences from the previous start
(sorted, so small). All arrays are concatenated into one gzip blob in base64, which the page
inflates with the browser's DecompressionStream. Times are integers in units of ``quantum``
ns (1 ns when the timeline spans under 4.3 s). 200k kernels take about 1.9 MB.
"""

from __future__ import annotations

import base64
import gzip
from typing import Any

import numpy as np

from tracekit.report.style import (
    SERIES_COLORS,
    SERIES_LABELS,
    hover_names,
    lane_labels,
    lane_positions,
    name_colors,
)
from tracekit.report.timeline import Timeline

_UNSIGNED = (np.uint8, np.uint16, np.uint32)
_SIGNED = (np.int8, np.int16, np.int32)
COLUMNS = ("start", "dur", "name", "step", "phase")


def smallest(values: np.ndarray) -> tuple[str, bytes]:
    """``("u2", bytes)``: integers in the smallest 8/16/32-bit type that holds them (values
    must fit in 32 bits)."""
    v = np.asarray(values, dtype=np.int64)
    lo, hi = (int(v.min()), int(v.max())) if v.size else (0, 0)
    for t in _UNSIGNED if lo >= 0 else _SIGNED:
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            dtype = np.dtype(t)
            return f"{dtype.kind}{dtype.itemsize}", v.astype(dtype.newbyteorder("<")).tobytes()
    raise ValueError(f"values {lo}..{hi} do not fit in 32 bits")


def quantum_ns(span_ns: int) -> int:
    """The smallest time unit (ns) in which ``span_ns`` fits 32 unsigned bits."""
    return max(1, -(-int(span_ns) // (2**32 - 1)))


def payload(timeline: Timeline) -> dict[str, Any]:
    """The JSON-ready data of ``timeline`` for ``templates/tracekit.js.j2``.

    ``groups[i][column] = [dtype, byte offset, count]`` into the inflated ``blob``."""
    seg = timeline.segments
    q = quantum_ns(max(timeline.span_ns, 1))
    start_q = np.clip(seg["start_ns"].to_numpy(np.int64), 0, None) // q
    end_q = -(-np.clip(seg["end_ns"].to_numpy(np.int64), 0, None) // q)
    lane = seg["lane"].to_numpy(np.int64)
    series = seg["series"].cat.codes.to_numpy()
    n = len(seg)
    change = np.ones(n, dtype=bool)
    change[1:] = (lane[1:] != lane[:-1]) | (series[1:] != series[:-1])
    bounds = np.flatnonzero(change).tolist()  # empty for an empty timeline: no groups
    columns = {
        "start": np.diff(start_q, prepend=0),
        "dur": end_q - start_q,
        "name": seg["name"].to_numpy(np.int64),
        "step": seg["step"].to_numpy(np.int64),
        "phase": seg["phase"].to_numpy(np.int64),
    }
    chunks: list[bytes] = []
    offset = 0
    groups = []
    ends = [*bounds[1:], n] if bounds else []
    for a, b in zip(bounds, ends, strict=True):  # one group per lane and series
        group: dict[str, Any] = {"lane": int(lane[a]), "series": str(seg["series"].iloc[a])}
        for column in COLUMNS:
            values = columns[column][a:b]
            if column == "start":
                values = np.concatenate([[start_q[a]], values[1:]])  # first one absolute
            dtype, data = smallest(values)
            group[column] = [dtype, offset, b - a]
            chunks.append(data)
            offset += len(data)
        groups.append(group)
    blob = gzip.compress(b"".join(chunks), compresslevel=6, mtime=0)
    return {
        "quantum_ns": q,
        "blob": base64.b64encode(blob).decode("ascii"),
        "names": hover_names(timeline),
        "name_colors": name_colors(timeline),
        "lanes": {"y": lane_positions(timeline).tolist(), "labels": lane_labels(timeline)},
        "series": {"labels": SERIES_LABELS, "colors": SERIES_COLORS},
        "groups": groups,
    }


def unpack(p: dict[str, Any]) -> list[dict[str, np.ndarray]]:
    """The groups' columns back as arrays (starts absolute again); the inverse of payload."""
    data = gzip.decompress(base64.b64decode(p["blob"]))
    out = []
    for g in p["groups"]:
        cols = {}
        for column in COLUMNS:
            dtype, offset, count = g[column]
            cols[column] = np.frombuffer(data, f"<{dtype}", count, offset).astype(np.int64)
        cols["start"] = np.cumsum(cols["start"])
        out.append(cols)
    return out
