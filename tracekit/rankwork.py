"""The map step: one file in, every figure that needs only its rank(s) out, small.

A task runs where the engine puts it (this process, a worker process, a Dask worker). It
returns picklable results: per-rank tables, the rank's window, notes, and only the comm rows
cross-rank matching needs; the full trace only when the caller asks (``keep_traces``).
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tracekit.collectives import collective_table, comm_rows
from tracekit.config import AnalysisConfig
from tracekit.errors import InternalError, TracekitError
from tracekit.load import load_file_safe
from tracekit.overlap import (
    Window,
    phase_ranges,
    phase_table,
    process_group_table,
    rank_figures,
    step_table,
    window,
)
from tracekit.schema import COMM, RANGE_STEP, RankTrace


@dataclass(frozen=True)
class FileTask:
    """One file of one group; ``index`` is its place in the group's sorted file list (the
    rank a rankless trace gets)."""

    group: str
    path: Path
    index: int


@dataclass(frozen=True)
class RankResult:
    """Everything the parent needs of one rank (well under 1 MB unless ``trace`` is kept)."""

    group: str
    rank: int
    source: Path
    platform: str
    window: Window
    row: dict  # the headline row (RANK_COLUMNS less ``group``)
    steps: pd.DataFrame  # step_table
    phases: pd.DataFrame  # phase_table
    collectives: pd.DataFrame  # collective_table
    process_groups: pd.DataFrame  # process_group_table
    comm: pd.DataFrame  # comm rows in the window for cross-rank matching (COMM_ROW_COLUMNS)
    notes: tuple[str, ...]
    trace: RankTrace | None = None  # only with keep_traces


@dataclass(frozen=True)
class FileResult:
    """A file's ranks, or the one error that made it unusable."""

    task: FileTask
    ranks: tuple[RankResult, ...]
    error: TracekitError | None
    seconds: float


def analyze_rank(
    group: str, trace: RankTrace, config: AnalysisConfig, keep_trace: bool = False
) -> RankResult:
    """Every figure of one rank, from its trace alone."""
    win = window(trace, config.steps)
    mask = win.mask(trace.kernels)
    per_step = step_table(trace)
    if config.steps is not None:
        per_step = per_step[config.steps.mask(per_step["step"].to_numpy())]
    return RankResult(
        group=group,
        rank=trace.rank,
        source=trace.source,
        platform=trace.platform,
        window=win,
        row={"rank": trace.rank, "platform": trace.platform, "window": win.describe}
        | rank_figures(trace, win).as_us()
        | {"source": str(trace.source)},
        steps=per_step,
        phases=phase_table(trace, win.steps),
        collectives=collective_table(trace, mask),
        process_groups=process_group_table(trace, mask),
        comm=comm_rows(trace, mask),
        notes=tuple(rank_notes(group, trace, mask, len(win.steps))),
        trace=trace if keep_trace else None,
    )


def analyze_file(task: FileTask, config: AnalysisConfig, keep_traces: bool = False) -> FileResult:
    """The map task: load ``task.path`` and analyse each of its ranks that ``config`` keeps.
    Never raises: a failure is the result's ``error``."""
    began = time.perf_counter()
    loaded = load_file_safe(task.path, config, default_rank=task.index)
    ranks: list[RankResult] = []
    error: TracekitError | None = loaded if isinstance(loaded, TracekitError) else None
    if error is None:
        try:
            for trace in loaded:
                if config.ranks is None or trace.rank in config.ranks:
                    ranks.append(analyze_rank(task.group, trace, config, keep_traces))
        except Exception as e:  # a bug in the analysis, met on this file
            tb = traceback.format_exc()
            error = InternalError(f"{type(e).__name__}: {e}", task.path, tb)
            ranks = []
    return FileResult(task, tuple(ranks), error, time.perf_counter() - began)


def rank_notes(group: str, trace: RankTrace, mask: np.ndarray, window_steps: int) -> list[str]:
    """Caveats for one rank, each naming the group, rank and file."""
    who = f"{group} rank {trace.rank} ({trace.source.name})"
    k = trace.kernels
    out = [f"{who}: {note}" for note in trace.meta.get("notes", ())]
    is_comm = (k["kind"] == COMM).to_numpy()
    if not is_comm.any():
        what = "communication kernels" if trace.platform == "gpu" else "gloo spans"
        out.append(f"{who}: no communication ({what}); overlap_pct is null")
    elif not (is_comm & mask).any():
        unlaunched = int((is_comm & (k["launch_ns"] < 0).to_numpy()).sum())
        out.append(
            f"{who}: no communication in the headline window, although the trace has "
            f"{int(is_comm.sum())} communication kernels ({unlaunched} without a launch "
            "correlation, which the headline, like HTA's, leaves out); overlap_pct is null; "
            "the per-step figures place unlaunched kernels in steps by their start time"
        )
    n_steps = int((trace.ranges["kind"] == RANGE_STEP).sum())
    if n_steps == 0:
        out.append(f"{who}: no step ranges; the headline covers all activity, no per-step rows")
    elif n_steps == 1:
        out.append(f"{who}: only one step; the headline covers all activity")
    if len(phase_ranges(trace)) == 0:
        out.append(f"{who}: no phase ranges (forward/backward/allreduce/optimizer or '## x ##')")
    elif trace.meta.get("phase_source") == "projected":
        out.append(
            f"{who}: no GPU-side phase annotations; phases are host ranges projected onto "
            "the GPU through the kernels launched inside them"
        )
    comm = k.loc[mask & (k["kind"] == COMM).to_numpy()]
    unknown = int((comm["bytes"] < 0).sum())
    if unknown:
        out.append(
            f"{who}: sizes unknown for {unknown} of {len(comm)} collectives (the trace records "
            "no collective arguments for them); their bandwidth is not computed"
        )
    if window_steps == 0 and n_steps > 1:
        out.append(f"{who}: none of the selected steps are in the trace")
    return out
