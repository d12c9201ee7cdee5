"""The tables every loader produces and every analysis reads, declared once.

Times are integer nanoseconds on the trace's own clock; column names carry their unit.
A loader returns one ``RankTrace`` per rank: its device activity (the kernel table) and its
step and phase ranges. Nothing downstream mutates these frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

# What a row of device activity is doing. ``other`` is host-side collective calls on CPU traces.
COMPUTE, COMM, MEMORY, SYNC, OTHER = "compute", "comm", "memory", "sync", "other"
KINDS = (COMPUTE, COMM, MEMORY, SYNC, OTHER)
KIND_DTYPE = pd.CategoricalDtype(KINDS)

CPU_DEVICE = -1  # ``device`` of activity that ran on a CPU thread (gloo traces)
NO_STEP = -1  # ``step`` of activity outside every step range
UNKNOWN = -1  # integer columns with no value

# The kernel table: one row per kernel, memcpy/memset, sync, or (on CPU traces) per span of
# host work. Rows on one (device, stream) lane never nest.
KERNEL_COLUMNS: dict[str, Any] = {
    "rank": "int64",  # global rank that recorded the row
    "device": "int64",  # GPU index; CPU_DEVICE for CPU threads
    "stream": "int64",  # GPU stream id, or the OS thread id on CPU traces
    "name": "object",  # kernel or operator name, as in the trace
    "kind": KIND_DTYPE,  # one of KINDS (see tracekit.classify)
    "start_ns": "int64",
    "end_ns": "int64",
    "launch_ns": "int64",  # start of the CPU call that launched it; start_ns on CPU; UNKNOWN
    "step": "int64",  # step whose range holds launch_ns; NO_STEP when none
    "correlation": "int64",  # launch correlation id; UNKNOWN when none
    "collective": "object",  # normalised collective ("allreduce", ...) for comm rows, else ""
    "bytes": "int64",  # message size of a collective, or bytes of a memcpy/memset; UNKNOWN
    "dtype": "object",  # element type of a collective's message ("float", ...); "" unknown
    "pg": "object",  # process group of a collective (name or description); "" unknown
    "pg_size": "int64",  # ranks in that process group; UNKNOWN
}

# Step and phase ranges. Steps come from the host; phases from the host (CPU traces) or from
# their projection onto the GPU (GPU traces), see ``device``.
RANGE_STEP, RANGE_PHASE = "step", "phase"
RANGE_COLUMNS: dict[str, Any] = {
    "rank": "int64",
    "kind": pd.CategoricalDtype((RANGE_STEP, RANGE_PHASE)),
    "name": "object",  # "ProfilerStep#3", "backward", "## forward ##", ...
    "step": "int64",  # step number the range belongs to; NO_STEP when none
    "device": "int64",  # CPU_DEVICE for host ranges, else the GPU the range is projected on
    "start_ns": "int64",
    "end_ns": "int64",
}


def empty(columns: dict[str, Any]) -> pd.DataFrame:
    """An empty frame with the declared columns and dtypes."""
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})


def conform(frame: pd.DataFrame, columns: dict[str, Any]) -> pd.DataFrame:
    """Return ``frame`` with exactly the declared columns, in order, with their dtypes."""
    missing = set(columns) - set(frame.columns)
    if missing:
        raise ValueError(f"table lacks columns {sorted(missing)}")
    out = frame.loc[:, list(columns)].reset_index(drop=True)
    return out.astype(columns)


@dataclass(frozen=True)
class RankTrace:
    """Everything tracekit read from one rank's trace."""

    rank: int
    source: Path  # the file it came from
    kernels: pd.DataFrame  # KERNEL_COLUMNS
    ranges: pd.DataFrame  # RANGE_COLUMNS
    platform: str  # "gpu" when the trace has device kernels, else "cpu"
    world_size: int | None = None  # from the trace's distributed info, when present
    meta: dict[str, Any] = field(default_factory=dict)  # backend, device names, versions ...
