"""Numbers for people and for programs, by one set of rules: JSON-safe values (missing or
non-finite as null, numpy as Python, floats to 4 decimals: µs to 0.1 ns) and table cells
(thousands separated, missing as ``n/a``). Used by ``output``, ``compare`` and the report."""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

MISSING = "n/a"
JSON_DECIMALS = 4


def clean(value: Any) -> Any:
    """A JSON-safe scalar: None/NaN/±inf/pd.NA -> None, numpy -> Python, floats rounded."""
    if value is None or value is pd.NA:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        return round(value, JSON_DECIMALS) if math.isfinite(value) else None
    return value


def records(frame: pd.DataFrame, drop: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The rows of ``frame`` (minus ``drop``) as lists of JSON-safe dicts."""
    cols = [c for c in frame.columns if c not in drop]
    return [
        {c: clean(v) for c, v in zip(cols, row, strict=True)}
        for row in frame[cols].itertuples(index=False, name=None)
    ]


def dumps(doc: Any) -> str:
    """The JSON text of ``doc`` (already cleaned): indented, never NaN, ASCII (a lone
    surrogate in a kernel name stays printable as an escape)."""
    return json.dumps(doc, indent=2, allow_nan=False)


def is_missing(value: Any) -> bool:
    if value is None or value is pd.NA:
        return True
    try:
        return not math.isfinite(float(value))
    except (TypeError, ValueError):
        return True


def number(
    value: Any,
    digits: int = 3,
    *,
    scale: float = 1.0,
    sign: bool = False,
    suffix: str = "",
    missing: str = MISSING,
) -> str:
    """A table cell: ``value * scale`` with ``digits`` decimals and thousands separators,
    ``+`` on positives when ``sign``, then ``suffix``; ``missing`` when there is no number."""
    if is_missing(value):
        return missing
    x = float(value) * scale
    if digits == 0:
        return f"{round(x):{'+' if sign else ''},}{suffix}"
    return f"{x:{'+' if sign else ''},.{digits}f}{suffix}"
