"""An Analysis as text: a table for people, JSON for programs, CSV for spreadsheets."""

from __future__ import annotations

import io
from typing import Any

import pandas as pd

from tracekit import summary
from tracekit.analysis import Analysis
from tracekit.format import dumps, number, records
from tracekit.overlap import FIGURE_COLUMNS

_PCT = "overlap_pct"


def to_dict(a: Analysis) -> dict[str, Any]:
    """The JSON document: ranks (with their steps and phases), collectives, cross-rank
    matching, notes and errors. Times are microseconds."""
    steps = dict(tuple(a.steps.groupby(["group", "rank"], sort=False)))
    phases = dict(tuple(a.phases.groupby(["group", "rank"], sort=False)))
    none = pd.DataFrame()
    ranks = []
    for rec in records(a.ranks):
        key = (rec["group"], rec["rank"])
        rec["steps"] = records(steps.get(key, none), drop=("group", "rank"))
        rec["phases"] = records(phases.get(key, none), drop=("group", "rank"))
        ranks.append(rec)
    return {
        "ranks": ranks,
        "collectives": records(a.collectives),
        "matched_collectives": records(a.matched),
        "stragglers": records(a.stragglers),
        "process_groups": records(a.process_groups),
        "collective_mismatches": records(a.mismatches),
        "notes": list(a.notes),
        "errors": [str(e) for e in a.failures],
    }


def to_json(a: Analysis) -> str:
    return dumps(to_dict(a))


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
    "step_us_sd": "± sd ms",
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
            out[_MS[c]] = v.map(lambda x: number(x, scale=1e-3, missing=""))
        elif c == _PCT:
            out["overlap %"] = v.map(lambda x: number(x, 1))
        elif c == "comm_share_pct":
            out["comm %"] = v.map(lambda x: number(x, 1))
        elif c == "speedup":
            out[f"speedup vs {BASELINE}"] = v.map(lambda x: number(x, 2, suffix="x", missing=""))
        elif c == "bytes":
            out["MB"] = v.map(lambda x: number(x, 2, scale=1e-6, missing="?"))
        elif c.endswith("_gbps"):
            out[c.replace("_gbps", " GB/s")] = v.map(lambda x: number(x, 2, missing=""))
        elif c == "group":
            out["variant"] = v
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

BASELINE = summary.BASELINE  # as in the variant summary: the variant speedups are relative to
# The variant summary's ms figures under analyze's names, in µs.
VARIANT_US = {
    "step_ms": "step_us",
    "step_ms_sd": "step_us_sd",
    "compute_ms": "compute_us",
    "comm_ms": "comm_us",
    "exposed_comm_ms": "exposed_comm_us",
    "idle_ms": "idle_us",
}
_VARIANT_TABLE = [
    "group",
    "ranks",
    "steps",
    "step_us",
    "compute_us",
    "comm_us",
    "comm_share_pct",
    _PCT,
    "exposed_comm_us",
    "idle_us",
    "speedup",
]


def variants_of(analysis: Analysis) -> pd.DataFrame:
    """The variant summary (ms) over each rank's window as the analysis decided it: the one
    call into the summary from output, compare and the CLI."""
    return summary.variant_summary(analysis)


def variants_frame(summary: pd.DataFrame) -> pd.DataFrame:
    """The variant summary (``variant_summary``) with analyze's column names and units (µs)."""
    out = summary.copy()
    for ms in VARIANT_US:
        if ms in out.columns:
            out[ms] = out[ms].astype(float) * 1e3
    return out.rename(columns=VARIANT_US)


def variants_table(summary: pd.DataFrame) -> str:
    """The variants side by side as text (ms, as analyze's table shows them)."""
    return _human(variants_frame(summary), _VARIANT_TABLE) + "\n"


def variants_csv(summary: pd.DataFrame) -> str:
    """One row per variant; analyze's column names, µs."""
    buf = io.StringIO()
    variants_frame(summary).to_csv(buf, index=False, float_format="%.3f")
    return buf.getvalue()


def variants_json(summary: pd.DataFrame) -> str:
    """``{"variants": [...]}``; analyze's column names, µs."""
    return dumps({"variants": records(variants_frame(summary))}) + "\n"
