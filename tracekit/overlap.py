"""Overlap of communication with compute, per rank, per step and per phase.

All arithmetic is on integer nanoseconds; the frames this module returns give microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import intervals as iv
from tracekit.schema import (
    COMM,
    COMPUTE,
    CPU_DEVICE,
    MEMORY,
    NO_STEP,
    RANGE_PHASE,
    RANGE_STEP,
    RankTrace,
)
from tracekit.selection import Selection

FIGURE_COLUMNS = (
    "comm_us",
    "compute_us",
    "overlap_us",
    "overlap_pct",
    "exposed_comm_us",
    "memory_us",
    "idle_us",
    "busy_us",
    "span_us",
)


@dataclass(frozen=True)
class Figures:
    """Busy-time figures over one window, in nanoseconds."""

    comm_ns: int  # union of communication intervals
    compute_ns: int  # union of compute intervals
    overlap_ns: int  # time both run at once
    memory_ns: int  # union of copies and fills (Memcpy, Memset)
    busy_ns: int  # union of all activity (compute, comm, memory, sync, other)
    span_ns: int  # the window: its length, or first start to last end of the activity

    @property
    def exposed_comm_ns(self) -> int:
        return self.comm_ns - self.overlap_ns

    @property
    def idle_ns(self) -> int:
        return max(self.span_ns - self.busy_ns, 0)

    @property
    def overlap_pct(self) -> float | None:
        return 100.0 * self.overlap_ns / self.comm_ns if self.comm_ns else None

    def as_us(self) -> dict[str, float | None]:
        """The figures as the ``*_us`` columns of the output tables."""
        return {
            "comm_us": self.comm_ns / 1e3,
            "compute_us": self.compute_ns / 1e3,
            "overlap_us": self.overlap_ns / 1e3,
            "overlap_pct": self.overlap_pct,
            "exposed_comm_us": self.exposed_comm_ns / 1e3,
            "memory_us": self.memory_ns / 1e3,
            "idle_us": self.idle_ns / 1e3,
            "busy_us": self.busy_ns / 1e3,
            "span_us": self.span_ns / 1e3,
        }


@dataclass(frozen=True)
class Split:
    """Where communication and compute run, alone or together (sorted disjoint intervals)."""

    comm: iv.Intervals  # any communication
    compute: iv.Intervals  # any compute
    both: iv.Intervals  # comm ∩ compute: communication hidden behind compute
    exposed: iv.Intervals  # comm − compute: communication nothing hides


def split(kernels: pd.DataFrame, within: iv.Intervals | None = None) -> Split:
    """The one overlap computation: comm and compute unions, their intersection and the
    exposed rest, optionally clipped to ``within``. Figures, timelines and exports use it."""
    start = kernels["start_ns"].to_numpy(np.int64)
    end = kernels["end_ns"].to_numpy(np.int64)
    kind = kernels["kind"].to_numpy()
    comm = iv.union(start[kind == COMM], end[kind == COMM])
    compute = iv.union(start[kind == COMPUTE], end[kind == COMPUTE])
    if within is not None:
        comm, compute = iv.intersect(comm, within), iv.intersect(compute, within)
    return Split(comm, compute, iv.intersect(comm, compute), iv.subtract(comm, compute))


def figures(kernels: pd.DataFrame, within: iv.Intervals | None = None) -> Figures:
    """Figures of a set of kernel rows, optionally restricted to the time ``within``."""
    return _figures(_unions(kernels), within)


def _unions(kernels: pd.DataFrame) -> dict[str, iv.Intervals]:
    """Where kernel rows run: comm, compute, memory and any (busy), as disjoint intervals."""
    start = kernels["start_ns"].to_numpy(np.int64)
    end = kernels["end_ns"].to_numpy(np.int64)
    kind = kernels["kind"].to_numpy()
    out = {k: iv.union(start[kind == k], end[kind == k]) for k in (COMM, COMPUTE, MEMORY)}
    return out | {"busy": iv.union(start, end)}


def _figures(unions: dict[str, iv.Intervals], within: iv.Intervals | None) -> Figures:
    """Figures from ``_unions`` (worked out once for many windows), clipped to ``within``."""
    comm, compute, memory, busy = (unions[k] for k in (COMM, COMPUTE, MEMORY, "busy"))
    if within is None:
        span = iv.extent(busy)
    else:
        comm, compute = iv.intersect(comm, within), iv.intersect(compute, within)
        busy, memory = iv.intersect(busy, within), iv.intersect(memory, within)
        span = iv.length(within)
    return Figures(
        comm_ns=iv.length(comm),
        compute_ns=iv.length(compute),
        overlap_ns=iv.length(iv.intersect(comm, compute)),
        memory_ns=iv.length(memory),
        busy_ns=iv.length(busy),
        span_ns=span,
    )


@dataclass(frozen=True)
class Window:
    """Which activity a rank's headline covers: decided once by the analysis and carried in
    ``Analysis.windows``; everything downstream asks it instead of deciding again."""

    steps: tuple[int, ...]  # the steps inside it, in trace order
    describe: str  # for notes and tables
    launch_before_ns: int | None = None  # HTA's cut: activity launched before this time
    chosen: bool = False  # True: the steps were chosen (--steps); activity of those steps only

    def mask(self, kernels: pd.DataFrame) -> np.ndarray:
        """Rows of ``kernels`` (a kernel table) inside the window."""
        if self.chosen:
            return kernels["step"].isin(self.steps).to_numpy()
        if self.launch_before_ns is not None:
            launch = kernels["launch_ns"].to_numpy()
            return (launch >= 0) & (launch < self.launch_before_ns)
        return np.ones(len(kernels), dtype=bool)


def window(trace: RankTrace, steps: Selection | None = None) -> Window:
    """HTA's window unless ``steps`` is given: activity launched before the last step began
    (so every complete step but the last, plus anything launched before the first step)."""
    step_ranges = trace.ranges[trace.ranges["kind"] == RANGE_STEP].sort_values("start_ns")
    numbers = tuple(int(s) for s in step_ranges["step"])
    if steps is not None:
        chosen = tuple(s for s in numbers if s in steps)
        return Window(chosen, f"steps {Selection.of(chosen)}", chosen=True)
    if len(numbers) > 1:
        last_start = int(step_ranges["start_ns"].iloc[-1])
        describe = f"steps {Selection.of(numbers[:-1])} (last step excluded)"
        return Window(numbers[:-1], describe, launch_before_ns=last_start)
    return Window(numbers, "all activity")


def rank_figures(trace: RankTrace, win: Window) -> Figures:
    """The per-rank headline."""
    return figures(trace.kernels.loc[win.mask(trace.kernels)])


def step_table(trace: RankTrace) -> pd.DataFrame:
    """One row per step: its host duration and the figures of the activity it launched."""
    step_ranges = trace.ranges[trace.ranges["kind"] == RANGE_STEP].sort_values("start_ns")
    by_step = dict(tuple(trace.kernels.groupby("step", sort=False)))
    rows = []
    for number, start, end in step_ranges[["step", "start_ns", "end_ns"]].itertuples(False):
        launched = by_step.get(number, trace.kernels.iloc[:0])
        row = {"step": int(number), "step_us": (end - start) / 1e3}
        rows.append(row | figures(launched).as_us())
    return pd.DataFrame(rows, columns=["step", "step_us", *FIGURE_COLUMNS])


def phase_ranges(trace: RankTrace) -> pd.DataFrame:
    """Phase ranges on the device that ran the work: GPU-side on GPU traces, host on CPU."""
    r = trace.ranges[trace.ranges["kind"] == RANGE_PHASE]
    on_gpu = r["device"] != CPU_DEVICE
    return r[on_gpu] if trace.platform == "gpu" else r[~on_gpu]


def phase_table(trace: RankTrace, steps: tuple[int, ...]) -> pd.DataFrame:
    """One row per phase name: the figures inside that phase's ranges in ``steps``."""
    r = phase_ranges(trace)
    r = r[r["step"].isin(steps) & (r["step"] != NO_STEP)]
    rows = []
    unions = _unions(trace.kernels)  # the same for every phase
    for name, ranges in r.groupby("name", sort=False):
        within = iv.union(ranges["start_ns"].to_numpy(), ranges["end_ns"].to_numpy())
        if within[0].size == 0:
            continue
        row = {"phase": name, "phase_us": iv.length(within) / 1e3, "first_ns": within[0][0]}
        rows.append(row | _figures(unions, within).as_us())
    table = pd.DataFrame(rows, columns=["phase", "phase_us", "first_ns", *FIGURE_COLUMNS])
    return table.sort_values("first_ns").drop(columns="first_ns").reset_index(drop=True)


PROCESS_GROUP_COLUMNS = (
    "rank",
    "pg",  # the process group ("" when the trace does not record it)
    "pg_size",  # its ranks; -1 unknown
    "collectives",  # count
    "bytes",  # total message size; null when any is unknown
    "comm_us",
    "overlap_us",
    "overlap_pct",
    "exposed_comm_us",
)


def process_group_table(trace: RankTrace, mask: np.ndarray) -> pd.DataFrame:
    """One row per process group on one rank (``mask``ed rows): its communication, the part
    hidden behind compute and the exposed rest (``split`` of its comm against all compute).
    Empty when the trace records no group; collectives without one are the row ``pg`` ""."""
    k = trace.kernels.loc[mask]
    kind = k["kind"].to_numpy()
    is_comm = kind == COMM
    compute = k.loc[kind == COMPUTE]
    rows = []
    comm_rows = k.loc[is_comm]
    if (comm_rows["pg"] == "").all():
        return pd.DataFrame(rows, columns=list(PROCESS_GROUP_COLUMNS))
    for pg, comm in comm_rows.groupby("pg", sort=True):
        parts = split(pd.concat([comm, compute]))
        comm_ns, both_ns = iv.length(parts.comm), iv.length(parts.both)
        known = bool((comm["bytes"] >= 0).all())
        rows.append(
            {
                "rank": trace.rank,
                "pg": pg,
                "pg_size": int(comm["pg_size"].max()),
                "collectives": len(comm),
                "bytes": float(comm["bytes"].sum()) if known else None,
                "comm_us": comm_ns / 1e3,
                "overlap_us": both_ns / 1e3,
                "overlap_pct": 100.0 * both_ns / comm_ns if comm_ns else None,
                "exposed_comm_us": iv.length(parts.exposed) / 1e3,
            }
        )
    return pd.DataFrame(rows, columns=list(PROCESS_GROUP_COLUMNS))
