"""What a report and a timeline page show, as data for the templates: formatted tables and
figures. Pure: builds from an Analysis (and the run's records); writes nothing."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pandas as pd
import plotly.graph_objects as go

from tracekit import summary
from tracekit.analysis import Analysis
from tracekit.report import figures, plots
from tracekit.report.lod import payload
from tracekit.report.manifest import Records
from tracekit.report.timeline import step_windows

if TYPE_CHECKING:
    from tracekit.compare import Comparison


@dataclass(frozen=True)
class FigureSpec:
    """A figure to embed; ``lod``: its timeline payload; ``link``: figures with the same link
    zoom together."""

    key: str
    figure: go.Figure
    lod: dict[str, Any] | None = None
    link: str | None = None


@dataclass(frozen=True)
class Table:
    """Formatted cells; ``numeric`` columns are right-aligned."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...]

    def __bool__(self) -> bool:
        return bool(self.rows)


@dataclass(frozen=True)
class Variant:
    """One variant's section."""

    group: str
    about: Table  # platform, backend, ranks, window, files
    step: int | None  # the representative step shown in the timeline
    timeline: FigureSpec | None
    phases: Table
    collectives: Table
    stragglers: Table
    kernels: Table


@dataclass(frozen=True)
class Report:
    title: str
    generated: str
    inputs: tuple[str, ...]
    summary: Table
    baseline: str | None  # the variant speedups are relative to
    variants_chart: FigureSpec | None
    breakdown: FigureSpec | None
    phases: FigureSpec | None
    variants: tuple[Variant, ...]
    timeline_span_ms: float
    manifest: dict[str, Any] | None
    manifest_path: str | None
    timings: dict[str, dict[str, Any]]
    notes: tuple[str, ...]
    failures: tuple[str, ...]
    comparison: Comparison | None = None
    whatif: Any = None  # tracekit.whatif.section.WhatIfSection, for a run with a naive variant

    def figures(self) -> list[FigureSpec]:
        found = [
            self.variants_chart,
            self.breakdown,
            self.phases,
            *(v.timeline for v in self.variants),
        ]
        return [f for f in found if f is not None]


@dataclass(frozen=True)
class TimelinePage:
    title: str
    generated: str
    inputs: tuple[str, ...]
    timelines: tuple[FigureSpec, ...]
    counts: tuple[tuple[str, int, int], ...]  # group, ranks, kernels
    notes: tuple[str, ...]
    failures: tuple[str, ...]
    extra: dict[str, Any] = field(default_factory=dict)

    def figures(self) -> list[FigureSpec]:
        return list(self.timelines)


# --- formatting ----------------------------------------------------------------------------


def fmt(value: Any, digits: int = 3, suffix: str = "") -> str:
    """A number for a table cell; missing values show as n/a."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "n/a"
    if digits == 0:
        return f"{round(float(value)):,}{suffix}"
    return f"{float(value):,.{digits}f}{suffix}"


def table(frame: pd.DataFrame, spec: Sequence[tuple[str, str, int | None]]) -> Table:
    """``spec``: (column, header, digits or None for text) per shown column."""
    rows = tuple(
        tuple(
            str(v) if digits is None else fmt(v, digits)
            for v, (_, _, digits) in zip(row, spec, strict=True)
        )
        for row in frame[[c for c, _, _ in spec]].itertuples(index=False, name=None)
    )
    return Table(tuple(h for _, h, _ in spec), rows, tuple(d is not None for _, _, d in spec))


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


# --- report --------------------------------------------------------------------------------


def summary_table(frame: pd.DataFrame, baseline: str | None) -> Table:
    spec: list[tuple[str, str, int | None]] = [
        ("group", "variant", None),
        ("platform", "platform", None),
        ("ranks", "ranks", 0),
        ("steps", "steps", 0),
        ("step_ms", "ms per step", 3),
        ("step_ms_sd", "± sd", 3),
    ]
    if baseline is not None:
        spec.append(("speedup", f"speedup vs {baseline}", 2))
    spec += [
        ("compute_ms", "compute ms", 3),
        ("comm_ms", "comm ms", 3),
        ("comm_share_pct", "comm share %", 1),
        ("overlap_pct", "overlap %", 1),
        ("exposed_comm_ms", "exposed comm ms", 3),
        ("memory_ms", "memory ms", 3),
        ("idle_ms", "idle ms", 3),
    ]
    return table(frame, spec)


def with_memory(analysis: Analysis, numbers: pd.DataFrame) -> pd.DataFrame:
    """``numbers`` (``summary.variant_summary``) with ``memory_ms``: copies and fills
    (Memcpy, Memset) per step, mean over the headline steps and ranks, as the other times
    (the whole trace when there are no steps)."""
    if "memory_ms" in numbers:
        return numbers
    rows = summary.step_rows(analysis)
    per_step = rows.groupby("group")["memory_us"].mean() / 1e3
    whole = analysis.ranks.groupby("group")["memory_us"].mean() / 1e3
    memory = numbers["group"].map(per_step).fillna(numbers["group"].map(whole))
    return numbers.assign(memory_ms=memory.to_numpy(float))


def _about(analysis: Analysis, group: str) -> Table:
    traces = analysis.traces[group]
    rows = []
    for t in traces:
        devices = ", ".join(str(d) for d in t.meta.get("devices") or [] if d)
        rows.append(
            (
                str(t.rank),
                t.platform,
                str(t.meta.get("backend") or "?"),
                str(t.world_size or "?"),
                devices or "—",
                _window(analysis, group, t.rank),
                f"{len(t.kernels):,}",
                t.source.name,
            )
        )
    columns = ("rank", "platform", "backend", "world size", "devices", "headline", "rows", "file")
    numeric = (True, False, False, True, False, False, True, False)
    return Table(columns, tuple(rows), numeric)


def _window(analysis: Analysis, group: str, rank: int) -> str:
    """How the analysis chose the rank's headline (``Analysis.windows``)."""
    win = analysis.windows.get((group, rank))
    return win.describe if win is not None else "—"


def step_timelines(analysis: Analysis) -> dict[str, tuple[int | None, FigureSpec | None]]:
    """Per group: its representative step and that step's timeline, each rank from its own
    step start, every group on the same x span (the longest step window shown)."""
    chosen: dict[str, tuple[int | None, dict[int, tuple[int, int]]]] = {}
    longest = 0
    for group, traces in analysis.traces.items():
        step = summary.representative_step(analysis, group)
        windows: dict[int, tuple[int, int]] = {}
        if step is not None:
            for t in traces:
                w = step_windows(t)
                row = w[w["step"] == step]
                if len(row):
                    windows[t.rank] = (int(row["start_ns"].iloc[0]), int(row["end_ns"].iloc[0]))
        chosen[group] = (step, windows)
        longest = max([longest, *(hi - lo for lo, hi in windows.values())])
    out: dict[str, tuple[int | None, FigureSpec | None]] = {}
    for i, (group, (step, windows)) in enumerate(chosen.items()):
        if not windows:
            out[group] = (step, None)
            continue
        tl = plots.timeline_data(analysis, group, ranks=list(windows), step=step)
        span_ms = max(longest / 1e6, 1e-3)
        fig = figures.timeline_figure(tl, x_range_ms=(0.0, span_ms), step_selector=False)
        out[group] = (step, FigureSpec(f"tk-step-{i}", fig, payload(tl), link="steps"))
    return out


def build_report(
    analysis: Analysis,
    records: Records | None = None,
    *,
    inputs: Sequence[str] = (),
    title: str | None = None,
    comparison: Comparison | None = None,
) -> Report:
    """Everything the report shows, from an analysis of one or more variants."""
    records = records or Records(None, None, {}, ())
    groups = analysis.groups
    numbers = with_memory(analysis, summary.variant_summary(analysis))
    baseline = summary.BASELINE if numbers["speedup"].notna().any() else None
    breakdown = plots.step_breakdown(analysis)
    phase_chart = plots.phases(analysis)
    phase_rows = summary.phase_summary(analysis)
    timelines = step_timelines(analysis)
    variants = []
    for group in groups:
        step, timeline = timelines.get(group, (None, None))
        variants.append(
            Variant(
                group=group,
                about=_about(analysis, group),
                step=step,
                timeline=timeline,
                phases=_phase_table(phase_rows[phase_rows["group"] == group]),
                collectives=_collective_table(analysis.collectives, group),
                stragglers=_straggler_table(analysis.stragglers, group),
                kernels=_kernel_table(summary.top_kernels(analysis, group)),
            )
        )
    spans = [
        t.figure.layout.xaxis.range[1] for _, t in timelines.values() if t is not None
    ]  # fmt: skip
    return Report(
        title=title or _title(inputs),
        generated=_now(),
        inputs=tuple(inputs),
        summary=summary_table(numbers, baseline),
        baseline=baseline,
        variants_chart=(
            FigureSpec("tk-variants", plots.variants(analysis))
            if numbers["step_ms"].notna().any()
            else None
        ),
        breakdown=FigureSpec("tk-breakdown", breakdown) if breakdown.data else None,
        phases=FigureSpec("tk-phases", phase_chart) if len(phase_rows) else None,
        variants=tuple(variants),
        timeline_span_ms=max(spans) if spans else 0.0,
        manifest=records.manifest,
        manifest_path=str(records.manifest_path) if records.manifest_path else None,
        timings={g: _timing_subset(doc) for g, doc in records.timings.items() if g in groups},
        notes=(*analysis.notes, *records.notes),
        failures=tuple(str(f) for f in analysis.failures),
        comparison=comparison,
        whatif=_whatif(inputs, numbers),
    )


def _whatif(inputs: Sequence[str], numbers: pd.DataFrame) -> Any:
    """The what-if section (tracekit.whatif), beside the measured ms per step."""
    from tracekit.whatif.section import report_section

    return report_section(inputs, dict(zip(numbers["group"], numbers["step_ms"], strict=True)))


def _title(inputs: Sequence[str]) -> str:
    names = ", ".join(str(i).rstrip("/").rsplit("/", 1)[-1] for i in inputs)
    return f"tracekit report: {names}" if names else "tracekit report"


def _timing_subset(doc: dict[str, Any]) -> dict[str, Any]:
    """The parts of a timing record that say how the variant ran."""
    keys = ("variant", "model_size", "world_size", "backend", "flags", "model", "environment")
    subset = {k: doc[k] for k in keys if k in doc}
    return subset or doc


def _phase_table(frame: pd.DataFrame) -> Table:
    return table(
        frame,
        [
            ("rank", "rank", 0),
            ("phase", "phase", None),
            ("phase_ms", "phase ms", 3),
            ("compute_ms", "compute ms", 3),
            ("comm_ms", "comm ms", 3),
            ("overlap_ms", "overlap ms", 3),
            ("overlap_pct", "overlap %", 1),
            ("exposed_comm_ms", "exposed comm ms", 3),
            ("idle_ms", "idle ms", 3),
        ],
    )


def _collective_table(frame: pd.DataFrame, group: str) -> Table:
    f = frame[frame["group"] == group]
    f = f.assign(
        mb=f["bytes"].astype(float) / 1e6,
        total_ms=f["total_us"].astype(float) / 1e3,
        mean_ms=f["mean_us"].astype(float) / 1e3,
    )
    return table(
        f,
        [
            ("rank", "rank", 0),
            ("collective", "collective", None),
            ("count", "count", 0),
            ("mb", "MB", 2),
            ("total_ms", "total ms", 3),
            ("mean_ms", "mean ms", 3),
            ("algbw_gbps", "algbw GB/s", 2),
            ("busbw_gbps", "busbw GB/s", 2),
        ],
    )


def _straggler_table(frame: pd.DataFrame, group: str) -> Table:
    f = frame[frame["group"] == group]
    f = f.assign(
        wait_ms=f["slowest_wait_us"].astype(float) / 1e3,
        max_ms=f["max_wait_us"].astype(float) / 1e3,
    )
    return table(
        f,
        [
            ("step", "step", 0),
            ("slowest_rank", "slowest rank", 0),
            ("wait_ms", "its wait ms", 3),
            ("max_ms", "max wait ms", 3),
            ("collectives", "collectives", 0),
        ],
    )


def _kernel_table(frame: pd.DataFrame) -> Table:
    return table(
        frame,
        [
            ("name", "name", None),
            ("kind", "kind", None),
            ("count", "count", 0),
            ("total_ms", "total ms", 3),
            ("mean_us", "mean µs", 2),
            ("share_pct", "% of busy time", 1),
        ],
    )


# --- timeline page -------------------------------------------------------------------------


def build_timeline_page(
    analysis: Analysis, *, inputs: Sequence[str] = (), title: str | None = None
) -> TimelinePage:
    """One timeline per group: every rank on one clock, over each rank's headline window
    (``Analysis.windows``: every step but the last unless --steps chose them)."""
    specs = []
    counts = []
    shown = []
    for i, (group, traces) in enumerate(analysis.traces.items()):
        tl = plots.timeline_data(analysis, group)
        specs.append(FigureSpec(f"tk-timeline-{i}", figures.timeline_figure(tl), payload(tl)))
        counts.append((group, len(traces), sum(len(t.kernels) for t in traces)))
        described = {_window(analysis, group, t.rank) for t in traces}
        shown.append("; ".join(sorted(described)))
    names = ", ".join(str(p).rstrip("/").rsplit("/", 1)[-1] for p in inputs)
    return TimelinePage(
        title=title or (f"tracekit timeline: {names}" if names else "tracekit timeline"),
        generated=_now(),
        inputs=tuple(inputs),
        timelines=tuple(specs),
        counts=tuple(counts),
        notes=analysis.notes,
        failures=tuple(str(f) for f in analysis.failures),
        extra={"shown": tuple(shown)},
    )
