"""Plotly figures of an analysis, for notebooks and for the HTML report (which uses these).

    from tracekit.analysis import analyze
    from tracekit.report import plots

    a = analyze(["runs/small-try"], keep_traces=True)  # timelines need the traces
    plots.step_breakdown(a)            # where step time goes, per variant
    plots.phases(a)                    # compute, overlap and exposed comm inside each phase
    plots.variants(a)                  # ms per step and overlap % of the variants side by side
    plots.rank_timeline(a, rank=0)     # one rank's steps, phases, streams, overlap, exposed comm

Every function is pure: it reads the analysis (its windows, figures and, for timelines, its
traces) and returns a ``plotly.graph_objects.Figure``; it writes nothing. In a notebook the
figure renders inline. A timeline drawn here is merged for its initial view only; the HTML
pages (``tracekit timeline``) re-merge on every zoom, so prefer ``step=`` here to see kernels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tracekit import summary
from tracekit.analysis import Analysis
from tracekit.report import figures
from tracekit.report.figures import TEMPLATE
from tracekit.report.style import esc
from tracekit.report.timeline import Timeline, build_timeline, step_windows

__all__ = [
    "phases",
    "rank_timeline",
    "step_breakdown",
    "timeline",
    "timeline_data",
    "variants",
]


def step_breakdown(analysis: Analysis) -> go.Figure:
    """Stacked bars per variant: compute only, comm overlapped with compute, exposed comm,
    other busy time and idle time (ms), per headline step and on average, mean over ranks."""
    return figures.breakdown_figure(summary.breakdown(analysis), analysis.groups)


def phases(analysis: Analysis) -> go.Figure:
    """Per variant and phase (ms per headline step, mean over ranks): compute only,
    overlapped, exposed comm and the rest of the phase, as horizontal stacked bars."""
    return figures.phase_figure(summary.phase_summary(analysis), analysis.groups)


def variants(analysis: Analysis, baseline: str = summary.BASELINE) -> go.Figure:
    """The variants side by side: ms per step (± sd over the headline steps, speedup vs
    ``baseline`` on hover) and how much of their communication is hidden (overlap %)."""
    s = summary.variant_summary(analysis, baseline=baseline)
    names = [esc(g) for g in s["group"]]
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=["ms per step (slowest rank)", "overlap % (comm hidden by compute)"],
        horizontal_spacing=0.12,
    )
    speedup = s["speedup"].to_numpy(float)
    note = np.where(
        np.isnan(speedup), "", np.char.mod(f"<br>speedup vs {esc(baseline)}: %.2f×", speedup)
    )
    fig.add_trace(
        go.Bar(
            x=names,
            y=s["step_ms"].to_numpy(float),
            error_y={"type": "data", "array": s["step_ms_sd"].fillna(0).to_numpy(float)},
            marker={"color": "#4C78A8"},
            customdata=note,
            hovertemplate="%{x}: %{y:.3f} ms per step%{customdata}<extra></extra>",
            name="ms per step",
            showlegend=False,
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Bar(
            x=names,
            y=s["overlap_pct"].to_numpy(float),
            marker={"color": "#54A24B"},
            hovertemplate="%{x}: %{y:.1f}% of comm overlapped<extra></extra>",
            name="overlap %",
            showlegend=False,
        ),
        row=1,
        col=2,
    )
    fig.update_yaxes(title_text="ms", row=1, col=1)
    fig.update_yaxes(title_text="%", range=[0, 100], row=1, col=2)
    fig.update_layout(
        template=TEMPLATE,
        height=360,
        margin={"l": 60, "r": 20, "t": 60, "b": 60},
        hovermode="closest",
    )
    return fig


def timeline_data(
    analysis: Analysis,
    group: str | None = None,
    *,
    ranks: Sequence[int] | None = None,
    step: int | None = None,
) -> Timeline:
    """The lanes and intervals of ``group``'s ranks (default: the first group, every rank):
    over each rank's headline window, or with ``step`` that step only, each rank from its own
    step start."""
    group = _group(analysis, group)
    traces = [t for t in analysis.traces[group] if ranks is None or t.rank in ranks]
    if not traces:
        raise ValueError(f"{group}: no rank among {list(ranks or [])}")
    if step is None:
        windows = headline_windows(analysis, group)
        return build_timeline(
            traces, windows=windows, title=group, origin="the first activity (all ranks)"
        )
    windows = {}
    for t in traces:
        w = step_windows(t)
        row = w[w["step"] == step]
        if len(row):
            windows[t.rank] = (int(row["start_ns"].iloc[0]), int(row["end_ns"].iloc[0]))
    if not windows:
        raise ValueError(f"{group}: no rank has step {step}")
    return build_timeline(
        [t for t in traces if t.rank in windows],
        windows=windows,
        origins={r: lo for r, (lo, _) in windows.items()},
        title=f"{group}: step {step}",
        origin="the step's start (per rank)",
    )


def timeline(
    analysis: Analysis,
    group: str | None = None,
    *,
    ranks: Sequence[int] | None = None,
    step: int | None = None,
    x_range_ms: tuple[float, float] | None = None,
) -> go.Figure:
    """The timeline of ``group``'s ranks (see ``timeline_data``): steps, phases, each compute
    and communication stream, when comm overlaps compute and when it is exposed. Runs of
    intervals under a pixel apart are merged, each drawn as high as it is busy."""
    tl = timeline_data(analysis, group, ranks=ranks, step=step)
    return figures.timeline_figure(tl, x_range_ms=x_range_ms, step_selector=step is None)


def rank_timeline(
    analysis: Analysis, rank: int = 0, group: str | None = None, *, step: int | None = None
) -> go.Figure:
    """One rank's timeline (see ``timeline``)."""
    return timeline(analysis, group, ranks=[rank], step=step)


def headline_windows(analysis: Analysis, group: str) -> dict[int, tuple[int, int]]:
    """Per rank of ``group``: from the first to the last of its headline steps' windows
    (``Analysis.windows``). A rank whose window is all its activity (no steps) shows
    everything; one whose chosen steps (--steps) are not in it shows nothing."""
    out = {}
    for t in analysis.traces[group]:
        win = analysis.windows.get((group, t.rank))
        if win is None or not (win.steps or win.chosen):
            continue
        w = step_windows(t)
        w = w[w["step"].isin(win.steps)]
        out[t.rank] = (int(w["start_ns"].min()), int(w["end_ns"].max())) if len(w) else (0, 0)
    return out


def _group(analysis: Analysis, group: str | None) -> str:
    if not analysis.traces:
        raise ValueError(
            "the analysis holds no traces: timelines need analyze(..., keep_traces=True)"
        )
    if group is None:
        return analysis.groups[0]
    if group not in analysis.traces:
        raise ValueError(f"no group {group!r}; the analysis has {', '.join(analysis.groups)}")
    return group
