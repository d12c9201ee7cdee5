"""The what-if section of ``tracekit report``: predictions beside the measured variants."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tracekit.errors import TracekitError
from tracekit.whatif.predict import WhatIf, predict_path


@dataclass(frozen=True)
class Cells:
    """Formatted cells, shaped like the report's tables (``numeric`` columns right-aligned)."""

    columns: tuple[str, ...]  # headers
    rows: tuple[tuple[str, ...], ...]  # one per predicted variant
    numeric: tuple[bool, ...]  # per column

    def __bool__(self) -> bool:
        return bool(self.rows)


@dataclass(frozen=True)
class WhatIfSection:
    """What the report shows: the model in a sentence, the table, the recommendation."""

    model: str  # where the predictions come from and the cost model
    table: Cells  # predicted vs measured per variant
    recommendation: str  # bucket size, e.g. "25 MB"
    reason: str  # why
    notes: tuple[str, ...]  # caveats


def report_section(
    inputs: Sequence[str], measured_ms: Mapping[str, float] | None = None
) -> WhatIfSection | None:
    """Predictions for a report of one run directory holding a naive variant; None for other
    inputs or when the traces cannot be predicted from (the report goes on without it).
    ``measured_ms``: the report's measured ms per step by variant, shown beside."""
    if len(inputs) != 1 or not (Path(inputs[0]) / "naive").is_dir():
        return None
    measured = {k: v * 1e3 for k, v in (measured_ms or {}).items()}
    try:
        w = predict_path(Path(inputs[0]), measured=measured if measured_ms is not None else True)
    except TracekitError:
        return None
    return section(w)


def section(w: WhatIf) -> WhatIfSection:
    """The section for an existing prediction."""
    rows = tuple(
        (
            p.variant,
            f"{p.step_us / 1e3:.1f}",
            "-" if p.measured_step_us is None else f"{p.measured_step_us / 1e3:.1f}",
            "-" if p.error_pct is None else f"{p.error_pct:+.1f}",
            f"{p.comm_us / 1e3:.1f}",
            f"{p.exposed_comm_us / 1e3:.1f}",
            "-" if p.overlap_pct is None else f"{p.overlap_pct:.1f}",
            str(p.collectives),
            f"{p.speedup:.2f}",
        )
        for p in w.predictions
    )
    columns = (
        *("variant", "predicted ms/step", "measured ms/step", "error %", "comm ms"),
        *("exposed comm ms", "overlap %", "all-reduces", f"speedup vs {w.measured_variant}"),
    )
    cost = w.cost
    model = (
        f"Predicted from {w.source.parent.name}/{w.source.name} (rank {w.rank}, steps "
        f"{w.steps[0]}-{w.steps[-1]}): all-reduce = {cost.latency_ns / 1e3:.0f} µs + bytes / "
        f"{cost.bandwidth_gbps:.2f} GB/s, fitted to {cost.samples} collectives (median error "
        f"{cost.median_error_pct or 0:.0f}% per collective, {cost.step_error_pct or 0:.0f}% per "
        f"step's total); contention {w.contention:.2f} "
        f"({w.contention_source}). See the README's What-if section for the model."
    )
    return WhatIfSection(
        model=model,
        table=Cells(columns, rows, (False,) + (True,) * (len(columns) - 1)),
        recommendation=w.recommendation,
        reason=w.reason,
        notes=w.notes,
    )
