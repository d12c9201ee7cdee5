"""A WhatIf as text: a table for people, JSON for programs, CSV for spreadsheets (µs)."""

from __future__ import annotations

import io
import json
import math
from typing import Any

import pandas as pd

from tracekit.selection import Selection
from tracekit.whatif.predict import WhatIf

COLUMNS = (
    "variant",
    "bucket_mb",
    "step_us",
    "comm_us",
    "exposed_comm_us",
    "overlap_pct",
    "collectives",
    "speedup",
    "measured_step_us",
    "error_pct",
)


def _clean(value: Any) -> Any:
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 3)
    return value


def rows(w: WhatIf) -> pd.DataFrame:
    """One row per predicted variant: COLUMNS."""
    return pd.DataFrame(
        [
            {c: getattr(p, c if c != "variant" else "variant") for c in COLUMNS}
            for p in w.predictions
        ],
        columns=list(COLUMNS),
    )


def to_dict(w: WhatIf) -> dict[str, Any]:
    """The JSON document: inputs, the cost model, one entry per variant (with its steps), the
    recommendation and the notes."""
    cost = w.cost
    return {
        "source": str(w.source),
        "rank": w.rank,
        "platform": w.platform,
        "measured_variant": w.measured_variant,
        "measured_step_us": _clean(w.measured_step_us),
        "steps": list(w.steps),
        "cost_model": {
            "collective": cost.collective,
            "latency_us": _clean(cost.latency_ns / 1e3),
            "bandwidth_gbps": _clean(cost.bandwidth_gbps),
            "samples": cost.samples,
            "sizes": cost.sizes,
            "median_error_pct": _clean(cost.median_error_pct),
            "step_error_pct": _clean(cost.step_error_pct),
            "note": cost.note,
        },
        "contention": {"factor": _clean(w.contention), "source": w.contention_source},
        "copy_ns_per_byte": _clean(w.costs.copy_ns_per_byte),
        "launch_us": _clean(w.costs.launch_ns / 1e3),
        "wait_us": _clean(w.costs.wait_ns / 1e3),
        "variants": [
            {c: _clean(getattr(p, c)) for c in COLUMNS}
            | {"steps": [{k: _clean(v) for k, v in s.items()} for s in p.per_step]}
            for p in w.predictions
        ],
        "recommendation": {"bucket": w.recommendation, "reason": w.reason},
        "notes": list(w.notes),
    }


def to_json(w: WhatIf) -> str:
    return json.dumps(to_dict(w), indent=2, allow_nan=False)


def to_csv(w: WhatIf) -> str:
    """One row per variant (COLUMNS)."""
    buf = io.StringIO()
    rows(w).to_csv(buf, index=False, float_format="%.3f")
    return buf.getvalue()


def to_table(w: WhatIf) -> str:
    """The predictions as an aligned table in ms, with the model and the recommendation."""
    cost = w.cost
    lines = [
        f"what-if from {w.source} (rank {w.rank}, {w.platform}, measured variant "
        f"{w.measured_variant}: {w.measured_step_us / 1e3:.1f} ms/step over steps "
        f"{Selection.of(w.steps)})",
        f"all-reduce cost: {cost.latency_ns / 1e3:.0f} µs + bytes / {cost.bandwidth_gbps:.2f} GB/s "
        f"(fitted to {cost.samples} collectives of {cost.sizes} sizes; median error "
        f"{_pct(cost.median_error_pct)}% per collective, {_pct(cost.step_error_pct)}% per step)"
        + (f"; {cost.note}" if cost.note else ""),
        f"contention: {w.contention:.2f} ({w.contention_source})",
        "",
    ]
    header = ("variant", "ms/step", "comm ms", "exposed ms", "overlap %", "calls", "speedup",
              "measured ms", "error %")  # fmt: skip
    body = [
        (
            p.variant,
            f"{p.step_us / 1e3:.1f}",
            f"{p.comm_us / 1e3:.1f}",
            f"{p.exposed_comm_us / 1e3:.1f}",
            _pct(p.overlap_pct),
            str(p.collectives),
            f"{p.speedup:.2f}x",
            "-" if p.measured_step_us is None else f"{p.measured_step_us / 1e3:.1f}",
            "-" if p.error_pct is None else f"{p.error_pct:+.1f}",
        )
        for p in w.predictions
    ]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    for r in [header, *body]:
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w_) for c, w_ in zip(r[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells))
    lines += ["", f"recommended bucket size: {w.recommendation}", f"  why: {w.reason}"]
    lines += [f"note: {n}" for n in w.notes]
    return "\n".join(lines) + "\n"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
