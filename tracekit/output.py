"""An Analysis as text: a table for people, JSON for programs, CSV for spreadsheets."""

from __future__ import annotations

import io
import json
import math
from typing import Any

import pandas as pd

from tracekit.analysis import Analysis
from tracekit.overlap import FIGURE_COLUMNS

_PCT = "overlap_pct"


def _clean(value: Any) -> Any:
    """JSON-safe scalar: NaN/None -> null, numpy -> Python, µs to ns precision."""
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 4)
    return value


def _records(frame: pd.DataFrame, drop: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    cols = [c for c in frame.columns if c not in drop]
    return [
        {c: _clean(v) for c, v in zip(cols, row, strict=True)}
        for row in frame[cols].itertuples(index=False, name=None)
    ]


def to_dict(a: Analysis) -> dict[str, Any]:
    """The JSON document: ranks (with their steps and phases), collectives, cross-rank
    matching, notes and errors. Times are microseconds."""
    steps = dict(tuple(a.steps.groupby(["group", "rank"], sort=False)))
    phases = dict(tuple(a.phases.groupby(["group", "rank"], sort=False)))
    none = pd.DataFrame()
    ranks = []
    for rec in _records(a.ranks):
        key = (rec["group"], rec["rank"])
        rec["steps"] = _records(steps.get(key, none), drop=("group", "rank"))
        rec["phases"] = _records(phases.get(key, none), drop=("group", "rank"))
        ranks.append(rec)
    return {
        "ranks": ranks,
        "collectives": _records(a.collectives),
        "matched_collectives": _records(a.matched),
        "stragglers": _records(a.stragglers),
        "process_groups": _records(a.process_groups),
        "collective_mismatches": _records(a.mismatches),
        "notes": list(a.notes),
        "errors": [str(e) for e in a.failures],
    }


def to_json(a: Analysis) -> str:
    return json.dumps(to_dict(a), indent=2, allow_nan=False)


CSV_COLUMNS = ("group", "rank", "scope", "step", "phase", "pg", "window", "step_us", "phase_us")


def to_csv(a: Analysis) -> str:
    """Flat rows, one per rank, step, phase and process group; ``scope`` says which."""
    scoped = (
        a.ranks.assign(scope="rank"),
        a.steps.assign(scope="step"),
        a.phases.assign(scope="phase"),
        a.process_groups.assign(scope="process_group"),
    )
    parts = [p for p in scoped if len(p)]
    flat = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    flat = flat.reindex(columns=[*CSV_COLUMNS, *FIGURE_COLUMNS])
    flat["step"] = flat["step"].astype("Int64")
    buf = io.StringIO()
    flat.to_csv(buf, index=False, float_format="%.3f")
    return buf.getvalue()


# --- table ---------------------------------------------------------------------------------

_MS = {
    "step_us": "step ms",
    "phase_us": "phase ms",
    "comm_us": "comm ms",
    "compute_us": "compute ms",
    "overlap_us": "overlap ms",
    "exposed_comm_us": "exposed comm ms",
    "idle_us": "idle ms",
    "total_us": "total ms",
    "mean_us": "mean ms",
    "dur_us": "dur ms",
    "slowest_wait_us": "its wait ms",
    "max_wait_us": "max wait ms",
}


def _human(frame: pd.DataFrame, columns: list[str]) -> str:
    """Fixed-width text of ``columns``: µs shown as ms, percentages with one decimal."""
    out = pd.DataFrame(index=frame.index)
    for c in columns:
        v = frame[c]
        if c in _MS:
            out[_MS[c]] = v.map(lambda x: "" if pd.isna(x) else f"{x / 1e3:,.3f}")
        elif c == _PCT:
            out["overlap %"] = v.map(lambda x: "n/a" if pd.isna(x) else f"{x:.1f}")
        elif c == "bytes":
            out["MB"] = v.map(lambda x: "?" if pd.isna(x) else f"{x / 1e6:,.2f}")
        elif c.endswith("_gbps"):
            out[c.replace("_gbps", " GB/s")] = v.map(lambda x: "" if pd.isna(x) else f"{x:.2f}")
        else:
            out[c] = v
    return out.to_string(index=False)


_FIG = ["comm_us", "compute_us", "overlap_us", _PCT, "exposed_comm_us", "idle_us"]


def to_table(a: Analysis) -> str:
    """A readable summary per group: headline, steps, phases, collectives, stragglers."""
    blocks: list[str] = []
    for group in a.ranks["group"].unique():
        ranks, steps, phases, colls, strag, pgs = (
            f[f["group"] == group]
            for f in (a.ranks, a.steps, a.phases, a.collectives, a.stragglers, a.process_groups)
        )
        head = f"== {group}: {len(ranks)} rank(s), {ranks['platform'].iloc[0]} trace =="
        blocks.append(head)
        blocks.append(_human(ranks, ["rank", "window", *_FIG]))
        if len(steps):
            blocks.append("\nPer step (activity launched in the step):")
            blocks.append(_human(steps, ["rank", "step", "step_us", *_FIG]))
        if len(phases):
            blocks.append("\nPer phase (activity inside the phase's ranges, headline steps):")
            blocks.append(_human(phases, ["rank", "phase", "phase_us", *_FIG]))
        if len(colls):
            blocks.append("\nCollectives:")
            cols = ["rank", "collective", "count", "bytes", "total_us", "mean_us"]
            blocks.append(_human(colls, [*cols, "algbw_gbps", "busbw_gbps"]))
        if len(pgs):
            blocks.append("\nPer process group (headline window; pg '' = not recorded):")
            cols = ["rank", "pg", "pg_size", "collectives", "bytes", "comm_us", "overlap_us"]
            blocks.append(_human(pgs, [*cols, _PCT, "exposed_comm_us"]))
        if len(strag):
            blocks.append("\nSlowest rank per step (the rank the others waited for):")
            cols = ["step", "slowest_rank", "slowest_wait_us", "max_wait_us", "collectives"]
            blocks.append(_human(strag, cols))
        blocks.append("")
    if a.notes:
        blocks.append("Notes:")
        blocks.extend(f"  - {n}" for n in a.notes)
    return "\n".join(blocks).rstrip() + "\n"


# --- variants side by side -----------------------------------------------------------------

VARIANT_COLUMNS = {
    "group": "variant",
    "step_ms": "ms/step",
    "comm_ms": "comm ms",
    "comm_share_pct": "comm %",
    "overlap_pct": "overlap %",
    "exposed_comm_ms": "exposed comm ms",
    "idle_ms": "idle ms",
    "speedup": "speedup vs naive",
}


def variants_table(summary: pd.DataFrame) -> str:
    """The cross-variant comparison (``tracekit.report.summary.variant_summary``) as text."""
    out = pd.DataFrame(index=summary.index)
    for col, label in VARIANT_COLUMNS.items():
        v = summary[col]
        if col == "group":
            out[label] = v
        elif col == "speedup":
            out[label] = v.map(lambda x: "" if pd.isna(x) else f"{x:.2f}x")
        else:
            out[label] = v.map(lambda x: "n/a" if pd.isna(x) else f"{x:,.1f}")
    return out.to_string(index=False) + "\n"


def variants_csv(summary: pd.DataFrame) -> str:
    buf = io.StringIO()
    summary.to_csv(buf, index=False, float_format="%.4f")
    return buf.getvalue()


def variants_json(summary: pd.DataFrame) -> str:
    return json.dumps({"variants": _records(summary)}, indent=2, allow_nan=False) + "\n"
