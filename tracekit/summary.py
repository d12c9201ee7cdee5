"""The figures a report and a comparison show per variant, derived from an Analysis.

Every per-step figure covers the headline steps: the steps of each rank's headline window
as the analysis decided it (``Analysis.windows``; every step but the last unless ``--steps``
chose them). Nothing here decides a window again.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis import Analysis
from tracekit.contract import NAIVE
from tracekit.schema import NO_STEP

BASELINE = NAIVE  # the variant speedups are relative to, when present

SUMMARY_COLUMNS = (
    "group",
    "platform",
    "ranks",
    "steps",  # headline steps (per rank)
    "basis",  # "per step", or "whole trace" when the traces have no step ranges
    "step_ms",  # mean over steps of the slowest rank's step time
    "step_ms_sd",  # standard deviation over steps of the same
    "compute_ms",  # mean over ranks and steps
    "comm_ms",
    "comm_share_pct",  # total comm time over total step time, all ranks
    "overlap_pct",  # total overlapped time over total comm time, all ranks
    "exposed_comm_ms",
    "idle_ms",
    "speedup",  # baseline step_ms over this step_ms (when the baseline is present)
)
# The parts of a step, bottom to top in the stacked bars; they add up to the step's span.
BREAKDOWN_PARTS = ("compute_only_ms", "overlapped_ms", "exposed_comm_ms", "other_ms", "idle_ms")
BREAKDOWN_LABELS = {
    "compute_only_ms": "compute only",
    "overlapped_ms": "comm overlapped with compute",
    "exposed_comm_ms": "exposed comm",
    "other_ms": "other busy (memory, sync, host calls)",
    "idle_ms": "idle",
}
MEAN = "mean"


def headline_steps(analysis: Analysis) -> pd.DataFrame:
    """``group, rank, step``: the steps of each rank's headline window."""
    rows = [(group, rank, s) for (group, rank), win in analysis.windows.items() for s in win.steps]
    return pd.DataFrame(rows, columns=["group", "rank", "step"]).astype(
        {"rank": "int64", "step": "int64"}
    )


def step_rows(analysis: Analysis) -> pd.DataFrame:
    """Rows of ``analysis.steps`` in the headline steps."""
    keys = headline_steps(analysis)
    frame = analysis.steps.astype({"rank": "int64", "step": "int64"})
    return frame.merge(keys, on=["group", "rank", "step"], how="inner")


def variant_summary(analysis: Analysis, baseline: str = BASELINE) -> pd.DataFrame:
    """One row per group (variant): SUMMARY_COLUMNS."""
    per_step = step_rows(analysis)
    rows = []
    for group in analysis.groups:
        ranks = analysis.ranks[analysis.ranks["group"] == group]
        mine = per_step[per_step["group"] == group]
        row: dict[str, object] = {
            "group": group,
            "platform": ranks["platform"].iloc[0] if len(ranks) else "",
            "ranks": len(ranks),
        }
        if len(mine):
            slowest = mine.groupby("step")["step_us"].max() / 1e3
            row |= {
                "steps": int(mine.groupby("rank")["step"].nunique().max()),
                "basis": "per step",
                "step_ms": slowest.mean(),
                "step_ms_sd": slowest.std(ddof=1) if len(slowest) > 1 else np.nan,
                "comm_share_pct": _pct(mine["comm_us"].sum(), mine["step_us"].sum()),
            }
            source = mine
        else:
            row |= {"steps": 0, "basis": "whole trace", "step_ms": np.nan, "step_ms_sd": np.nan}
            row["comm_share_pct"] = _pct(ranks["comm_us"].sum(), ranks["span_us"].sum())
            source = ranks
        row |= {
            "compute_ms": source["compute_us"].mean() / 1e3,
            "comm_ms": source["comm_us"].mean() / 1e3,
            "overlap_pct": _pct(source["overlap_us"].sum(), source["comm_us"].sum()),
            "exposed_comm_ms": source["exposed_comm_us"].mean() / 1e3,
            "idle_ms": source["idle_us"].mean() / 1e3,
        }
        rows.append(row)
    out = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    base = out.loc[out["group"] == baseline, "step_ms"]
    if len(base) and pd.notna(base.iloc[0]):
        out["speedup"] = base.iloc[0] / out["step_ms"]
    return out


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else np.nan


def breakdown(analysis: Analysis) -> pd.DataFrame:
    """``group, step, label`` and BREAKDOWN_PARTS in ms, mean over ranks, per headline step
    and (label ``mean``) over them. The parts of a step add up to its span: the time from the
    first start to the last end of the activity launched in it."""
    s = step_rows(analysis)
    compute_only = s["compute_us"] - s["overlap_us"]
    union = s["compute_us"] + s["comm_us"] - s["overlap_us"]
    parts = pd.DataFrame(
        {
            "group": s["group"],
            "step": s["step"],
            "compute_only_ms": compute_only / 1e3,
            "overlapped_ms": s["overlap_us"] / 1e3,
            "exposed_comm_ms": s["exposed_comm_us"] / 1e3,
            "other_ms": (s["busy_us"] - union).clip(lower=0) / 1e3,
            "idle_ms": s["idle_us"] / 1e3,
        }
    )
    cols = list(BREAKDOWN_PARTS)
    per_step = parts.groupby(["group", "step"], sort=False, as_index=False)[cols].mean()
    means = per_step.groupby("group", sort=False, as_index=False)[cols].mean()
    per_step["label"] = "step " + per_step["step"].astype(str)
    means = means.assign(step=NO_STEP, label=MEAN)
    out = pd.concat([per_step, means], ignore_index=True)
    order = {g: i for i, g in enumerate(analysis.groups)}
    out["order"] = out["group"].map(order)
    out["is_mean"] = out["label"] == MEAN
    out = out.sort_values(["order", "is_mean", "step"], kind="stable", ignore_index=True)
    return out[["group", "step", "label", *cols]]


def representative_step(analysis: Analysis, group: str) -> int | None:
    """The headline step, common to all ranks of ``group``, whose slowest-rank step time is
    the (lower) median; None when the group has no steps."""
    s = step_rows(analysis)
    s = s[s["group"] == group]
    if s.empty:
        return None
    n_ranks = s["rank"].nunique()
    per_step = s.groupby("step").agg(ranks=("rank", "nunique"), slowest=("step_us", "max"))
    common = per_step[per_step["ranks"] == n_ranks]
    if common.empty:
        common = per_step
    ordered = common.sort_values(["slowest"], kind="stable")
    return int(ordered.index[(len(ordered) - 1) // 2])


def phase_summary(analysis: Analysis) -> pd.DataFrame:
    """``analysis.phases`` per headline step: each *_us figure divided by the rank's number of
    headline steps, as ms (overlap_pct unchanged)."""
    counts = headline_steps(analysis).groupby(["group", "rank"]).size()
    p = analysis.phases.astype({"rank": "int64"})
    n = counts.reindex(pd.MultiIndex.from_frame(p[["group", "rank"]])).to_numpy(float)
    n = np.where(np.isnan(n) | (n == 0), 1.0, n)
    out = p[["group", "rank", "phase"]].copy()
    for c in ("phase_us", "compute_us", "comm_us", "overlap_us", "exposed_comm_us", "idle_us"):
        out[c.replace("_us", "_ms")] = p[c].to_numpy(float) / n / 1e3
    out["overlap_pct"] = p["overlap_pct"].to_numpy(float)
    return out


def top_kernels(analysis: Analysis, group: str, n: int = 12) -> pd.DataFrame:
    """The ``n`` names with the most time in the headline windows of ``group``'s ranks:
    ``name, kind, count, total_ms, mean_us, share_pct`` (of all the activity's time). Needs the
    traces (``analyze(..., keep_traces=True)``); empty without them."""
    columns = ["name", "kind", "count", "total_ms", "mean_us", "share_pct"]
    frames = [
        t.kernels.loc[
            analysis.windows[group, t.rank].mask(t.kernels), ["name", "kind", "start_ns", "end_ns"]
        ]
        for t in analysis.traces.get(group, ())
    ]
    k = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if k.empty:
        return pd.DataFrame(columns=columns)
    k = k.assign(dur=(k["end_ns"] - k["start_ns"]).to_numpy(np.int64), kind=k["kind"].astype(str))
    g = k.groupby(["name", "kind"], as_index=False).agg(count=("dur", "size"), total=("dur", "sum"))
    g = g.nlargest(n, "total")
    total = k["dur"].sum()
    return pd.DataFrame(
        {
            "name": g["name"],
            "kind": g["kind"],
            "count": g["count"],
            "total_ms": g["total"] / 1e6,
            "mean_us": g["total"] / g["count"] / 1e3,
            "share_pct": 100.0 * g["total"] / total if total else np.nan,
        },
        columns=columns,
    ).reset_index(drop=True)
