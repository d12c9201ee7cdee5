"""Plotly figures of a report. Pure: each takes data and returns a ``go.Figure``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tracekit.report.style import (
    BAR_WIDTH,
    BREAKDOWN_COLORS,
    LANE_HEIGHT_PX,
    SERIES_COLORS,
    SERIES_LABELS,
    bar_heights,
    esc,
    hover_text,
    lane_labels,
    lane_positions,
    name_colors,
)
from tracekit.report.timeline import PHASE, SERIES, STEP, Timeline, view
from tracekit.summary import BREAKDOWN_LABELS, BREAKDOWN_PARTS, MEAN

# plotly_white's look without its per-trace-type defaults (7 KB in every figure's JSON).
# Legends sit at the bottom of the figure, below the x axis and its title, never on them.
BOTTOM_LEGEND = {
    "orientation": "h",
    "yref": "container",
    "y": 0,
    "yanchor": "bottom",
    "x": 0,
    "xanchor": "left",
}
_GRID = {"gridcolor": "#EBF0F8", "linecolor": "#EBF0F8", "zerolinecolor": "#EBF0F8"}
TEMPLATE = go.layout.Template(
    layout={
        "font": {"color": "#2a3f5f"},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "hoverlabel": {"align": "left"},
        "xaxis": {**_GRID, "ticks": "", "automargin": True},
        "yaxis": {**_GRID, "ticks": "", "automargin": True},
    }
)
PLOT_WIDTH_PX = 1100  # the plot area the initial timeline view is merged for
BLOCK_BUDGET = 3000  # blocks drawn per timeline view, at most (about)
TRACE_META = "tracekit:"  # meta of timeline traces, which the page script redraws on zoom
MAX_STEP_BUTTONS = 16  # more steps than this: a drop-down instead of a row of buttons
LEGEND_ROW_PX = 28  # height of one row of a horizontal legend


def timeline_figure(
    timeline: Timeline,
    *,
    x_range_ms: tuple[float, float] | None = None,
    step_selector: bool = True,
    width_px: int = PLOT_WIDTH_PX,
    budget: int = BLOCK_BUDGET,
) -> go.Figure:
    """The timeline: one horizontal bar per interval (or per merged run of short ones), one
    trace per series (step, phase, kernel kinds, overlap), lanes on the y axis."""
    span_ms = timeline.span_ns / 1e6
    lo_ms, hi_ms = x_range_ms if x_range_ms is not None else (0.0, max(span_ms, 1e-3))
    blocks = view(timeline, lo_ms * 1e6, hi_ms * 1e6, width_px=width_px, budget=budget)
    ys = lane_positions(timeline)
    colors = name_colors(timeline)
    ms_per_px = (hi_ms - lo_ms) / width_px
    fig = go.Figure()
    for series in SERIES:
        b = blocks[blocks["series"] == series]
        if b.empty and series not in _present(timeline):
            continue
        start = b["start_ns"].to_numpy(np.int64) / 1e6
        width = np.maximum(b["end_ns"].to_numpy(np.int64) / 1e6 - start, ms_per_px)
        ranges = series in (PHASE, STEP)
        bar = go.Bar(
            orientation="h",
            name=SERIES_LABELS[series],
            y=ys[b["lane"].to_numpy(np.int64)],
            base=start,
            x=width,
            width=BAR_WIDTH if ranges else bar_heights(b),
            marker={"color": SERIES_COLORS[series], "line": {"width": 0}},
            hovertext=hover_text(b, timeline).to_numpy(dtype=object),
            hovertemplate="%{hovertext}<extra></extra>",
            meta=TRACE_META + series,
        )
        if ranges:
            names = np.array([c or SERIES_COLORS[series] for c in colors] + [""], dtype=object)
            codes = b["name"].to_numpy(np.int64)
            if series == PHASE:
                bar.marker.color = names[codes]
            bar.text = _bar_labels(timeline, codes)
            bar.showlegend = False  # coloured per name, and labelled inside the bars
            bar.textposition = "inside"
            bar.insidetextanchor = "middle"
        fig.add_trace(bar)
    step_lanes = _rank_bands(timeline, ys)
    menu = step_selector and len(timeline.steps) > 1
    top = 90 if menu else 50  # title, and the step buttons under it
    lanes_px = int(LANE_HEIGHT_PX * (ys[-1] + 1 if ys.size else 1))
    height = lanes_px + top + 60 + 2 * LEGEND_ROW_PX
    fig.update_layout(
        template=TEMPLATE,
        title={"text": esc(timeline.title), "x": 0, "xanchor": "left"},
        barmode="overlay",
        height=height,
        hovermode="closest",
        hoverlabel={"align": "left"},
        uniformtext={"mode": "hide", "minsize": 8},
        legend=BOTTOM_LEGEND,
        margin={"l": 10, "r": 20, "t": top, "b": 60 + 2 * LEGEND_ROW_PX},
        shapes=step_lanes,
        xaxis={
            "title": {"text": esc(f"ms since {timeline.origin}" if timeline.origin else "ms")},
            "range": [lo_ms, hi_ms],
            "zeroline": False,
        },
        yaxis={
            "tickvals": ys.tolist(),
            "ticktext": lane_labels(timeline),
            "range": [float(ys[-1]) + 0.6 if ys.size else 1, -0.6],
            "fixedrange": True,
            "showgrid": False,
            "automargin": True,
        },
    )
    if menu:
        fig.update_layout(updatemenus=[_step_menu(timeline, (lo_ms, hi_ms))])
    return fig


def _present(timeline: Timeline) -> set[str]:
    return set(timeline.segments["series"].astype(str).unique().tolist())


def _bar_labels(timeline: Timeline, codes: np.ndarray) -> np.ndarray:
    """Names written inside step and phase bars (plotly hides those that do not fit)."""
    names = np.array([esc(n) for n in timeline.names] + [""], dtype=object)
    return names[codes]


def _rank_bands(timeline: Timeline, ys: np.ndarray) -> list[dict]:
    """A light band behind every other rank's lanes."""
    ranks = np.array([lane.rank for lane in timeline.lanes])
    bands = []
    for i, rank in enumerate(dict.fromkeys(ranks.tolist())):
        if i % 2 == 0:
            continue
        lanes = ys[ranks == rank]
        bands.append(
            {
                "type": "rect",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": float(lanes.min()) - 0.5,
                "y1": float(lanes.max()) + 0.5,
                "fillcolor": "rgba(0,0,0,0.04)",
                "line": {"width": 0},
                "layer": "below",
            }
        )
    return bands


def _step_menu(timeline: Timeline, full: tuple[float, float]) -> dict:
    """Buttons that zoom to one step (its window over all ranks) or back to all of them: a row
    of buttons, each listed once; a drop-down when there are more than MAX_STEP_BUTTONS."""
    buttons = [{"label": "all steps", "method": "relayout", "args": [{"xaxis.range": full}]}]
    for step, start, end in timeline.steps[["step", "start_ns", "end_ns"]].itertuples(False):
        pad = (end - start) * 0.02
        window = [(start - pad) / 1e6, (end + pad) / 1e6]
        buttons.append(
            {"label": f"step {step}", "method": "relayout", "args": [{"xaxis.range": window}]}
        )
    row = len(buttons) <= MAX_STEP_BUTTONS + 1
    return {
        "type": "buttons" if row else "dropdown",
        "direction": "right" if row else "down",
        "buttons": buttons,
        "active": 0,
        "x": 0,
        "xanchor": "left",
        "y": 1.0,
        "yanchor": "bottom",
        "pad": {"b": 6},
        "showactive": True,
    }


def breakdown_figure(frame: pd.DataFrame, groups: Sequence[str]) -> go.Figure:
    """Stacked bars per variant: compute only, overlapped, exposed comm, other, idle (ms),
    per step and on average (``summary.breakdown`` rows), one panel per variant."""
    groups = [g for g in groups if (frame["group"] == g).any()]
    cols = max(len(groups), 1)
    fig = make_subplots(
        rows=1,
        cols=cols,
        shared_yaxes=True,
        subplot_titles=[esc(g) for g in groups],
        horizontal_spacing=0.03,
    )
    for i, group in enumerate(groups, start=1):
        rows = frame[frame["group"] == group]
        labels = rows["label"].tolist()
        for part in BREAKDOWN_PARTS:
            fig.add_trace(
                go.Bar(
                    x=labels,
                    y=rows[part].to_numpy(float),
                    name=BREAKDOWN_LABELS[part],
                    legendgroup=part,
                    showlegend=i == 1,
                    marker={"color": BREAKDOWN_COLORS[part]},
                    hovertemplate="%{x}: %{y:.3f} ms<extra>" + BREAKDOWN_LABELS[part] + "</extra>",
                ),
                row=1,
                col=i,
            )
        if MEAN in labels:
            fig.add_vline(
                x=len(labels) - 1.5, line={"width": 1, "dash": "dot", "color": "#888"}, col=i
            )
    fig.update_layout(
        template=TEMPLATE,
        barmode="stack",
        height=420 + 2 * LEGEND_ROW_PX,
        margin={"l": 60, "r": 20, "t": 60, "b": 40 + 2 * LEGEND_ROW_PX},
        legend=BOTTOM_LEGEND,
        hovermode="closest",
    )
    fig.update_yaxes(title_text="ms per step (mean over ranks)", row=1, col=1)
    return fig


def phase_figure(frame: pd.DataFrame, groups: Sequence[str]) -> go.Figure:
    """Per variant and phase (mean over ranks, ms per step): compute only, overlapped, exposed
    comm and the rest of the phase, as horizontal stacked bars (``summary.phase_summary``)."""
    f = frame[frame["group"].isin(groups)]
    mean = f.groupby(["group", "phase"], sort=False, as_index=False).mean(numeric_only=True)
    parts = {
        "compute_only_ms": mean["compute_ms"] - mean["overlap_ms"],
        "overlapped_ms": mean["overlap_ms"],
        "exposed_comm_ms": mean["exposed_comm_ms"],
        "other_ms": (
            mean["phase_ms"] - mean["compute_ms"] - mean["exposed_comm_ms"] - mean["idle_ms"]
        ).clip(lower=0),
        "idle_ms": mean["idle_ms"],
    }
    labels = (mean["group"].map(esc) + " · " + mean["phase"].map(esc)).tolist()
    fig = go.Figure()
    for part, values in parts.items():
        fig.add_trace(
            go.Bar(
                orientation="h",
                y=labels,
                x=values.to_numpy(float),
                name=BREAKDOWN_LABELS[part],
                marker={"color": BREAKDOWN_COLORS[part]},
                hovertemplate="%{y}: %{x:.3f} ms<extra>" + BREAKDOWN_LABELS[part] + "</extra>",
            )
        )
    fig.update_layout(
        template=TEMPLATE,
        barmode="stack",
        height=max(220, 26 * len(labels) + 120) + 2 * LEGEND_ROW_PX,
        margin={"l": 10, "r": 20, "t": 30, "b": 60 + 2 * LEGEND_ROW_PX},
        legend=BOTTOM_LEGEND | {"traceorder": "normal"},  # as stacked, left to right
        yaxis={"autorange": "reversed", "automargin": True},
        xaxis={"title": {"text": "ms per step (mean over ranks)"}},
    )
    return fig
