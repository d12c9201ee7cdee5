"""The facade: trace paths (or loaded traces) in, every figure out, as DataFrames.

Analysis is map-reduce: a task per file computes everything its rank needs alone
(``tracekit.rankwork``), an engine runs the tasks (``tracekit.engine``), and ``reduce`` here
combines the small results and matches collectives across ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pandas as pd

from tracekit import engine as engines
from tracekit.collectives import (
    COLLECTIVE_COLUMNS,
    COMM_ROW_COLUMNS,
    MATCH_COLUMNS,
    MISMATCH_COLUMNS,
    STRAGGLER_COLUMNS,
    match,
)
from tracekit.config import AnalysisConfig
from tracekit.errors import TracekitError
from tracekit.load.discover import discover
from tracekit.overlap import FIGURE_COLUMNS, PROCESS_GROUP_COLUMNS, Window
from tracekit.rankwork import FileResult, FileTask, RankResult, analyze_file, analyze_rank
from tracekit.schema import RankTrace

RANK_COLUMNS = ("group", "rank", "platform", "window", *FIGURE_COLUMNS, "source")
STEP_COLUMNS = ("group", "rank", "step", "step_us", *FIGURE_COLUMNS)
PHASE_COLUMNS = ("group", "rank", "phase", "phase_us", *FIGURE_COLUMNS)


def _empty(columns: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame(columns=list(columns))


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
    # Full traces by group: only when analysed with keep_traces=True (reports, exports).
    traces: Mapping[str, tuple[RankTrace, ...]] = field(default_factory=dict)
    # Each rank's headline window, keyed (group, rank): the one place it is decided.
    windows: Mapping[tuple[str, int], Window] = field(default_factory=dict)
    # One row per rank and process group: its comm, overlap and exposed time.
    process_groups: pd.DataFrame = field(
        default_factory=lambda: _empty(("group", *PROCESS_GROUP_COLUMNS))
    )
    # Collective instances the ranks disagree on (never paired).
    mismatches: pd.DataFrame = field(default_factory=lambda: _empty(("group", *MISMATCH_COLUMNS)))

    @property
    def groups(self) -> list[str]:
        """Group names in input order."""
        return list(dict.fromkeys([*self.traces, *(g for g, _ in self.windows)]))


@dataclass(frozen=True)
class TaskDone:
    """Progress: one file's task finished (``done`` of ``total``)."""

    done: int
    total: int
    group: str
    path: Path
    ranks: tuple[int, ...]  # the ranks it held; empty when it failed
    seconds: float
    error: TracekitError | None


Progress = Callable[[TaskDone], None]


def analyze(
    paths: Iterable[str | Path],
    config: AnalysisConfig | None = None,
    *,
    engine: str = "local",
    scheduler: str | None = None,
    keep_traces: bool = False,
    progress: Progress | None = None,
    jobs: int | None = None,
) -> Analysis:
    """Load every trace under ``paths`` and analyse it, one task per file on ``engine``
    ("local": this process or a process pool of ``jobs``; "dask": the cluster at
    ``scheduler``, or a local one). ``keep_traces`` keeps the full traces in
    ``Analysis.traces`` (reports, timelines and exports need them)."""
    config = config or AnalysisConfig()
    tasks = [FileTask(g.name, f, i) for g in discover(paths) for i, f in enumerate(g.files)]

    def done(n: int, total: int, task: FileTask, result: FileResult) -> None:
        if progress:
            ranks = tuple(r.rank for r in result.ranks)
            progress(TaskDone(n, total, task.group, task.path, ranks, result.seconds, result.error))

    results = engines.run(
        tasks,
        partial(analyze_file, config=config, keep_traces=keep_traces),
        engine=engine,
        scheduler=scheduler,
        jobs=jobs,
        sizes=[t.path for t in tasks],
        done=done,
    )
    return reduce(results)


def analyze_traces(
    groups: Mapping[str, Sequence[RankTrace]],
    config: AnalysisConfig | None = None,
    failures: Sequence[TracekitError] = (),
) -> Analysis:
    """Figures for already loaded traces, grouped by run or variant (kept in the result)."""
    config = config or AnalysisConfig()
    results = [
        FileResult(FileTask(group, t.source, i), (analyze_rank(group, t, config, True),), None, 0)
        for group, traces in groups.items()
        for i, t in enumerate(traces)
    ]
    return reduce(results, failures)


def reduce(results: Sequence[FileResult], failures: Sequence[TracekitError] = ()) -> Analysis:
    """The reduce step: one Analysis from the tasks' results (in input order). A rank that
    two files claim is kept from the first and reported for the second."""
    errors = list(failures)
    by_group: dict[str, list[RankResult]] = {}
    seen: dict[tuple[str, int], Path] = {}
    for result in results:
        if result.error is not None:
            errors.append(result.error)
            continue
        by_group.setdefault(result.task.group, [])
        for r in result.ranks:
            if (r.group, r.rank) in seen:
                errors.append(
                    TracekitError(f"rank {r.rank} is also in {seen[r.group, r.rank]}", r.source)
                )
                continue
            seen[r.group, r.rank] = r.source
            by_group[r.group].append(r)

    ranks, steps, phases, colls, pgs = [], [], [], [], []
    matched, stragglers, mismatches = [], [], []
    notes: list[str] = []
    windows: dict[tuple[str, int], Window] = {}
    traces: dict[str, tuple[RankTrace, ...]] = {}
    for group, members in by_group.items():
        if not members:
            continue
        members.sort(key=lambda r: r.rank)
        for r in members:
            windows[group, r.rank] = r.window
            ranks.append({"group": group} | r.row)
            steps.append(r.steps.assign(group=group, rank=r.rank))
            phases.append(r.phases.assign(group=group, rank=r.rank))
            colls.append(r.collectives.assign(group=group))
            pgs.append(r.process_groups.assign(group=group))
            notes.extend(r.notes)
        kept = [r.trace for r in members if r.trace is not None]
        if kept:
            traces[group] = tuple(kept)
        comm = [r.comm for r in members if len(r.comm)]
        rows = pd.concat(comm, ignore_index=True) if comm else _empty(COMM_ROW_COLUMNS)
        m = match(rows, len(members))
        matched.append(m.matched.assign(group=group))
        stragglers.append(m.stragglers.assign(group=group))
        mismatches.append(m.mismatches.assign(group=group))
        notes.extend(f"{group}: {note}" for note in m.notes)
    return Analysis(
        ranks=_floats(pd.DataFrame(ranks, columns=list(RANK_COLUMNS))),
        steps=_stack(steps, STEP_COLUMNS),
        phases=_stack(phases, PHASE_COLUMNS),
        collectives=_stack(colls, ("group", *COLLECTIVE_COLUMNS)),
        matched=_stack(matched, ("group", *MATCH_COLUMNS)),
        stragglers=_stack(stragglers, ("group", *STRAGGLER_COLUMNS)),
        notes=tuple(notes),
        failures=tuple(errors),
        traces=traces,
        windows=windows,
        process_groups=_stack(pgs, ("group", *PROCESS_GROUP_COLUMNS)),
        mismatches=_stack(mismatches, ("group", *MISMATCH_COLUMNS)),
    )


def _floats(frame: pd.DataFrame) -> pd.DataFrame:
    """Figure columns as float, a missing percentage as NaN."""
    return frame.astype({c: "float64" for c in FIGURE_COLUMNS if c in frame.columns})


def _stack(frames: list[pd.DataFrame], columns: Sequence[str]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return _floats(_empty(columns))
    return _floats(pd.concat(frames, ignore_index=True).loc[:, list(columns)])
