"""The facade: trace paths (or loaded traces) in, every figure out, as DataFrames."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from tracekit.collectives import (
    COLLECTIVE_COLUMNS,
    MATCH_COLUMNS,
    STRAGGLER_COLUMNS,
    collective_table,
    match_across_ranks,
)
from tracekit.config import AnalysisConfig
from tracekit.errors import TracekitError
from tracekit.load import Progress, load
from tracekit.overlap import (
    FIGURE_COLUMNS,
    Window,
    phase_ranges,
    phase_table,
    rank_figures,
    step_table,
    window,
)
from tracekit.schema import COMM, RANGE_STEP, RankTrace

RANK_COLUMNS = ("group", "rank", "platform", "window", *FIGURE_COLUMNS, "source")


@dataclass(frozen=True)
class Analysis:
    """Every figure tracekit computes; each frame has a ``group`` column (run or variant)."""

    ranks: pd.DataFrame  # the headline, one row per rank
    steps: pd.DataFrame  # one row per rank and step
    phases: pd.DataFrame  # one row per rank and phase
    collectives: pd.DataFrame  # one row per rank and collective type
    matched: pd.DataFrame  # one row per collective instance and rank, matched across ranks
    stragglers: pd.DataFrame  # one row per step: the rank the others waited for
    notes: tuple[str, ...] = ()  # what a reader must know to trust the figures
    failures: tuple[TracekitError, ...] = ()  # inputs that could not be used
    traces: Mapping[str, tuple[RankTrace, ...]] = field(default_factory=dict)
    # Each rank's headline window, keyed (group, rank): the one place it is decided.
    windows: Mapping[tuple[str, int], Window] = field(default_factory=dict)

    @property
    def groups(self) -> list[str]:
        return list(self.traces)


def analyze(
    paths: Iterable[str | Path],
    config: AnalysisConfig | None = None,
    *,
    progress: Progress | None = None,
    jobs: int | None = None,
) -> Analysis:
    """Load every trace under ``paths`` and analyse it."""
    config = config or AnalysisConfig()
    loaded = load(paths, config, progress=progress, jobs=jobs)
    return analyze_traces(loaded.groups, config, failures=loaded.failures)


def analyze_traces(
    groups: Mapping[str, Sequence[RankTrace]],
    config: AnalysisConfig | None = None,
    failures: Sequence[TracekitError] = (),
) -> Analysis:
    """Figures for already loaded traces, grouped by run or variant."""
    config = config or AnalysisConfig()
    ranks, steps, phases, colls, matched, stragglers = [], [], [], [], [], []
    notes: list[str] = []
    windows: dict[tuple[str, int], Window] = {}
    for group, traces in groups.items():
        masks = []
        for trace in traces:
            win = window(trace, config.steps)
            windows[group, trace.rank] = win
            mask = win.mask(trace.kernels)
            masks.append(mask)
            head = rank_figures(trace, win)
            ranks.append(
                {"group": group, "rank": trace.rank, "platform": trace.platform}
                | {"window": win.describe, "source": str(trace.source)}
                | head.as_us()
            )
            per_step = step_table(trace)
            if config.steps is not None:
                per_step = per_step[config.steps.mask(per_step["step"].to_numpy())]
            steps.append(per_step.assign(group=group, rank=trace.rank))
            phases.append(phase_table(trace, win.steps).assign(group=group, rank=trace.rank))
            colls.append(collective_table(trace, mask).assign(group=group))
            notes.extend(_notes(group, trace, mask, len(win.steps)))
        m, s = match_across_ranks(traces, masks)
        matched.append(m.assign(group=group))
        stragglers.append(s.assign(group=group))
    return Analysis(
        ranks=_frame(ranks, RANK_COLUMNS),
        steps=_stack(steps, ("group", "rank", "step", "step_us", *FIGURE_COLUMNS)),
        phases=_stack(phases, ("group", "rank", "phase", "phase_us", *FIGURE_COLUMNS)),
        collectives=_stack(colls, ("group", *COLLECTIVE_COLUMNS)),
        matched=_stack(matched, ("group", *MATCH_COLUMNS)),
        stragglers=_stack(stragglers, ("group", *STRAGGLER_COLUMNS)),
        notes=tuple(notes),
        failures=tuple(failures),
        traces={g: tuple(t) for g, t in groups.items()},
        windows=windows,
    )


def _floats(frame: pd.DataFrame) -> pd.DataFrame:
    """Figure columns as float, a missing percentage as NaN."""
    return frame.astype({c: "float64" for c in FIGURE_COLUMNS if c in frame.columns})


def _frame(rows: list[dict], columns: Sequence[str]) -> pd.DataFrame:
    return _floats(pd.DataFrame(rows, columns=list(columns)))


def _stack(frames: list[pd.DataFrame], columns: Sequence[str]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return _floats(pd.DataFrame(columns=list(columns)))
    return _floats(pd.concat(frames, ignore_index=True).loc[:, list(columns)])


def _notes(group: str, trace: RankTrace, mask: np.ndarray, window_steps: int) -> list[str]:
    """Caveats for one rank, each naming the group, rank and file."""
    who = f"{group} rank {trace.rank} ({trace.source.name})"
    k = trace.kernels
    out = [f"{who}: {note}" for note in trace.meta.get("notes", ())]
    if not (k["kind"] == COMM).any():
        what = "NCCL/RCCL kernels" if trace.platform == "gpu" else "gloo spans"
        out.append(f"{who}: no communication ({what}); overlap_pct is null")
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
