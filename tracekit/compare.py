"""Two runs or variants side by side: their figures, the differences, and a verdict.

"Slower" is measured on ms per step: the mean, over the headline steps, of the slowest rank's
step time (``tracekit.summary``). B's change is ``(B - A) / A`` in percent. It counts as
a change only beyond the noise threshold: the larger of ``noise_pct`` and twice the standard
error of the difference of the two means (from the step-to-step spread), as a percentage of A.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from tracekit.analysis import Analysis
from tracekit.errors import TracekitError
from tracekit.summary import variant_summary

DEFAULT_NOISE_PCT = 2.0
SLOWER, FASTER, SAME = "slower", "faster", "same"

# (summary column, label, unit); unit "%" figures change in percentage points.
METRICS = (
    ("step_ms", "ms per step", "ms"),
    ("compute_ms", "compute ms per step", "ms"),
    ("comm_ms", "comm ms per step", "ms"),
    ("comm_share_pct", "comm share", "%"),
    ("overlap_pct", "overlap", "%"),
    ("exposed_comm_ms", "exposed comm ms per step", "ms"),
    ("idle_ms", "idle ms per step", "ms"),
)


@dataclass(frozen=True)
class Pair:
    """One variant of A against one of B."""

    a: str  # group names
    b: str
    a_figures: dict[str, Any]  # variant_summary rows
    b_figures: dict[str, Any]
    change_pct: float  # of ms per step, B against A
    threshold_pct: float  # the noise threshold the verdict used
    verdict: str  # SLOWER, FASTER or SAME

    def rows(self) -> list[tuple[str, float, float, float, float]]:
        """(label, A, B, B - A, change %) per metric; the change % is NaN for percentages."""
        out = []
        for column, label, unit in METRICS:
            a = _num(self.a_figures.get(column))
            b = _num(self.b_figures.get(column))
            delta = b - a
            pct = 100.0 * delta / a if unit != "%" and a else math.nan
            out.append((f"{label} (%)" if unit == "%" else label, a, b, delta, pct))
        return out

    def sentence(self) -> str:
        if self.verdict == SAME:
            return (
                f"{self.b} is as fast as {self.a}: ms per step changed by "
                f"{self.change_pct:+.1f}%, within the noise threshold of ±{self.threshold_pct:.1f}%"
            )
        return (
            f"{self.b} is {abs(self.change_pct):.1f}% {self.verdict} than {self.a} in ms per "
            f"step (noise threshold ±{self.threshold_pct:.1f}%)"
        )


@dataclass(frozen=True)
class Comparison:
    a_label: str  # what A and B were (the paths given)
    b_label: str
    pairs: tuple[Pair, ...]
    noise_pct: float
    fail_above: float | None  # percent; None: no gate

    def regressions(self) -> list[Pair]:
        """Pairs where B is slower than A by more than ``fail_above`` percent."""
        if self.fail_above is None:
            return []
        return [p for p in self.pairs if p.change_pct > self.fail_above]

    def side_by_side(self) -> list[tuple[Pair, list[tuple[str, ...]]]]:
        """Per pair, formatted rows (metric, A, B, B - A, change) for a report."""
        return [
            (
                p,
                [
                    (m, _cell(a), _cell(b), _cell(d, sign=True),
                     _cell(c, sign=True, suffix="%", digits=1))
                    for m, a, b, d, c in p.rows()
                ],
            )
            for p in self.pairs
        ]  # fmt: skip

    def gate(self) -> str | None:
        """The --fail-above outcome as a sentence (None without a gate)."""
        if self.fail_above is None:
            return None
        bad = self.regressions()
        if bad:
            names = ", ".join(f"{p.b} (+{p.change_pct:.1f}%)" for p in bad)
            return f"FAIL: slower than A by more than {self.fail_above:g}%: {names}"
        return f"PASS: nothing is slower than A by more than {self.fail_above:g}%"


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def pair_groups(a: Analysis, b: Analysis, a_label: str, b_label: str) -> list[tuple[str, str]]:
    """Which group of A goes with which of B: the only one of each, else those named alike
    (two run directories with the same variants)."""
    if len(a.groups) == 1 and len(b.groups) == 1:
        return [(a.groups[0], b.groups[0])]
    common = [g for g in a.groups if g in b.groups]
    if not common:
        raise TracekitError(
            f"nothing to pair: A has {', '.join(a.groups)}; B has {', '.join(b.groups)} "
            "(pass one variant directory each, or two runs with the same variants)",
            b_label,
        )
    return [(g, g) for g in common]


def verdict(a: dict[str, Any], b: dict[str, Any], noise_pct: float) -> tuple[float, float, str]:
    """(change %, threshold %, verdict) of B's ms per step against A's."""
    ma, mb = _num(a.get("step_ms")), _num(b.get("step_ms"))
    if not (ma > 0 and mb >= 0):
        raise TracekitError(f"no step time to compare for {a['group']} and {b['group']} "
                            "(the traces need step ranges such as ProfilerStep#N)")  # fmt: skip
    change = 100.0 * (mb - ma) / ma
    se = math.sqrt(_var_of_mean(a) + _var_of_mean(b))
    threshold = max(noise_pct, 200.0 * se / ma if math.isfinite(se) else 0.0)
    if change > threshold:
        return change, threshold, SLOWER
    if change < -threshold:
        return change, threshold, FASTER
    return change, threshold, SAME


def _var_of_mean(row: dict[str, Any]) -> float:
    sd, n = _num(row.get("step_ms_sd")), _num(row.get("steps"))
    return sd * sd / n if math.isfinite(sd) and n > 1 else 0.0


def compare(
    a: Analysis,
    b: Analysis,
    *,
    a_label: str = "A",
    b_label: str = "B",
    noise_pct: float = DEFAULT_NOISE_PCT,
    fail_above: float | None = None,
) -> Comparison:
    """Compare every paired variant of ``a`` and ``b`` (see ``pair_groups``)."""
    sa = variant_summary(a).set_index("group", drop=False)
    sb = variant_summary(b).set_index("group", drop=False)
    pairs = []
    for ga, gb in pair_groups(a, b, a_label, b_label):
        ra, rb = sa.loc[ga].to_dict(), sb.loc[gb].to_dict()
        change, threshold, word = verdict(ra, rb, noise_pct)
        pairs.append(Pair(ga, gb, ra, rb, change, threshold, word))
    return Comparison(a_label, b_label, tuple(pairs), noise_pct, fail_above)


def to_text(comparison: Comparison) -> str:
    """Figures side by side, differences and the verdict of each pair; then the gate."""
    blocks = [f"A: {comparison.a_label}", f"B: {comparison.b_label}", ""]
    for pair in comparison.pairs:
        rows = pair.rows()
        frame = pd.DataFrame(
            {
                "": [r[0] for r in rows],
                f"A {pair.a}": [_cell(r[1]) for r in rows],
                f"B {pair.b}": [_cell(r[2]) for r in rows],
                "B - A": [_cell(r[3], sign=True) for r in rows],
                "change": [_cell(r[4], sign=True, suffix="%", digits=1) for r in rows],
            }
        )
        blocks.append(f"== {pair.a} -> {pair.b} ==")
        blocks.append(frame.to_string(index=False))
        blocks.append(f"verdict: {pair.sentence()}")
        blocks.append("")
    gate = comparison.gate()
    if gate:
        blocks.append(gate)
    return "\n".join(blocks).rstrip() + "\n"


def _cell(value: float, *, sign: bool = False, suffix: str = "", digits: int = 3) -> str:
    if not math.isfinite(value):
        return "n/a"
    return f"{value:{'+' if sign else ''},.{digits}f}{suffix}"


def to_dict(comparison: Comparison) -> dict[str, Any]:
    """The comparison as JSON-ready data."""

    def clean(v: Any) -> Any:
        v = v.item() if hasattr(v, "item") else v
        return None if isinstance(v, float) and not math.isfinite(v) else v

    return {
        "a": comparison.a_label,
        "b": comparison.b_label,
        "measure": "ms per step: mean over headline steps of the slowest rank's step time",
        "noise_pct": comparison.noise_pct,
        "fail_above_pct": comparison.fail_above,
        "pairs": [
            {
                "a": p.a,
                "b": p.b,
                "change_pct": clean(p.change_pct),
                "threshold_pct": clean(p.threshold_pct),
                "verdict": p.verdict,
                "figures": [
                    {"metric": m, "a": clean(x), "b": clean(y), "delta": clean(d), "pct": clean(c)}
                    for m, x, y, d, c in p.rows()
                ],
            }
            for p in comparison.pairs
        ],
        "regressed": bool(comparison.regressions()),
    }


def relabel(analysis: Analysis, prefix: str) -> Analysis:
    """``analysis`` with every group renamed ``prefix + group``."""
    rename = {g: f"{prefix}{g}" for g in analysis.groups}

    def frame(f: pd.DataFrame) -> pd.DataFrame:
        return f.assign(group=f["group"].map(rename)) if "group" in f.columns else f

    return Analysis(
        ranks=frame(analysis.ranks),
        steps=frame(analysis.steps),
        phases=frame(analysis.phases),
        collectives=frame(analysis.collectives),
        matched=frame(analysis.matched),
        stragglers=frame(analysis.stragglers),
        notes=analysis.notes,
        failures=analysis.failures,
        traces={rename[g]: t for g, t in analysis.traces.items()},
        windows={(rename[g], r): w for (g, r), w in analysis.windows.items()},
        process_groups=frame(analysis.process_groups),
        mismatches=frame(analysis.mismatches),
    )


def combine(analyses: Sequence[Analysis]) -> Analysis:
    """One analysis holding the groups of all (their group names must differ)."""

    def cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
        kept = [f for f in frames if len(f)]
        return pd.concat(kept, ignore_index=True) if kept else frames[0]

    traces: dict = {}
    windows: dict = {}
    for a in analyses:
        traces.update(a.traces)
        windows.update(a.windows)
    return Analysis(
        ranks=cat([a.ranks for a in analyses]),
        steps=cat([a.steps for a in analyses]),
        phases=cat([a.phases for a in analyses]),
        collectives=cat([a.collectives for a in analyses]),
        matched=cat([a.matched for a in analyses]),
        stragglers=cat([a.stragglers for a in analyses]),
        notes=tuple(n for a in analyses for n in a.notes),
        failures=tuple(f for a in analyses for f in a.failures),
        traces=traces,
        windows=windows,
        process_groups=cat([a.process_groups for a in analyses]),
        mismatches=cat([a.mismatches for a in analyses]),
    )
