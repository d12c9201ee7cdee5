"""Check the model on real runs: predict every variant from each run's naive trace and compare
with the variants measured in the same run.

    python -m tracekit.whatif.validate RUN [RUN ...]

The contention factor for a run is measured from the OTHER runs' naive and overlap traces
(leave one out), so that no run's own overlap measurement leaks into its prediction. Step
times are medians over the headline steps (the slowest rank per step) on both sides: on a
shared machine single steps swing by 2x and a mean follows them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tracekit.errors import TracekitError
from tracekit.whatif.extract import extract
from tracekit.whatif.predict import (
    CPU_CONTENTION,
    VARIANT_NAMES,
    _rank_file,
    _run_bucket_mb,
    contention_factor,
    predict_path,
)


@dataclass(frozen=True)
class RunCheck:
    """One run's predictions against its measurements (ms per step, medians over steps)."""

    run: Path  # the run directory
    contention: float  # the factor used (from the other runs)
    own_contention: float | None  # the factor this run's own traces give
    predicted_ms: dict[str, float]  # by variant
    measured_ms: dict[str, float]  # by variant
    error_pct: dict[str, float]  # 100 * (predicted - measured) / measured
    ranking_right: bool  # variants in the same order, fastest first
    measured_spread_pct: dict[str, float]  # interquartile range / median of measured steps
    load_ratio: dict[str, float]  # variant's forward time over naive's (background load)

    @property
    def adjusted_ranking_right(self) -> bool:
        names = list(self.measured_ms)
        scaled = {v: self.predicted_ms[v] * self.load_ratio[v] for v in names}
        return sorted(names, key=scaled.get) == sorted(names, key=self.measured_ms.get)

    def misordered(self, variants: tuple[str, ...], gap: float = 0.8) -> list[tuple[str, str]]:
        """Pairs (a, b) of ``variants`` measured clearly apart (a < gap * b) that the
        load-adjusted predictions put the other way round."""
        names = [v for v in variants if v in self.measured_ms]
        scaled = {v: self.predicted_ms[v] * self.load_ratio[v] for v in names}
        m = self.measured_ms
        return [
            (a, b) for a in names for b in names if m[a] < gap * m[b] and scaled[a] >= scaled[b]
        ]

    @property
    def adjusted_error_pct(self) -> dict[str, float]:
        """Error after scaling the prediction by the load ratio: forward passes are the same
        work in every variant, so a longer forward means a busier machine, not the model."""
        return {
            v: 100.0 * (self.predicted_ms[v] * self.load_ratio[v] - m) / m
            for v, m in self.measured_ms.items()
        }


def own_contention(run: Path) -> float | None:
    """The contention factor of one run's naive and overlap traces (rank 0)."""
    try:
        pair = [extract(_rank_file(run / v, 0), 0, v) for v in ("naive", "overlap")]
    except TracekitError:  # a run without the pair has no factor
        return None
    return contention_factor(*pair)


def measured_steps(run: Path, variant: str) -> np.ndarray:
    """Per headline step, the slowest rank's step time (ms)."""
    from tracekit.analysis import analyze

    steps = analyze([run / variant]).steps
    last = steps["step"].max()
    head = steps[steps["step"] != last]
    return head.groupby("step")["step_us"].max().to_numpy() / 1e3


def check(run: Path, contention: float) -> RunCheck:
    """Predict ``run``'s variants from its naive trace with ``contention``."""
    w = predict_path(run, contention=contention, measured=False)
    bucket = _run_bucket_mb(run)
    predicted, measured, spread, load = {}, {}, {}, {}
    forward = _forward_ms(run, "naive")
    for p in w.predictions:
        key = p.name if p.name != "bucketed" or p.bucket_mb == bucket else None
        if key is None or not (run / key).is_dir():
            continue
        predicted[key] = float(np.median([s["step_us"] for s in p.per_step])) / 1e3
        steps = measured_steps(run, key)
        measured[key] = float(np.median(steps))
        q1, q3 = np.percentile(steps, [25, 75])
        spread[key] = 100.0 * (q3 - q1) / measured[key]
        load[key] = _forward_ms(run, key) / forward
    names = [v for v in VARIANT_NAMES if v in predicted]
    error = {v: 100.0 * (predicted[v] - measured[v]) / measured[v] for v in names}
    order = sorted(names, key=predicted.get) == sorted(names, key=measured.get)
    return RunCheck(run, contention, None, predicted, measured, error, order, spread, load)


def _forward_ms(run: Path, variant: str) -> float:
    """Median time from step start to backward start (forward) on rank 0."""
    data = extract(_rank_file(run / variant, 0), 0, variant)
    return float(np.median([s.pre_ns for s in data.steps])) / 1e6


def validate(runs: list[Path]) -> list[RunCheck]:
    """Every run checked with the median contention of the others (default when alone)."""
    factors = {run: own_contention(run) for run in runs}
    out = []
    for run in runs:
        others = [f for r, f in factors.items() if r != run and f is not None]
        factor = float(np.median(others)) if others else CPU_CONTENTION
        c = check(run, factor)
        out.append(RunCheck(c.run, c.contention, factors[run], *_rest(c)))
    return out


def _rest(c: RunCheck) -> tuple:
    return (c.predicted_ms, c.measured_ms, c.error_pct, c.ranking_right, c.measured_spread_pct,
            c.load_ratio)  # fmt: skip


def to_markdown(checks: list[RunCheck]) -> str:
    """One table row per run and variant, then the summary lines."""
    lines = [
        "| run | contention used (own) | variant | predicted ms | measured ms | error % "
        "| measured IQR % | load ratio | load-adjusted error % |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    errors, adjusted = [], []
    for c in checks:
        own = "-" if c.own_contention is None else f"{c.own_contention:.2f}"
        for v in c.predicted_ms:
            lines.append(
                f"| {c.run.name} | {c.contention:.2f} ({own}) | {v} | {c.predicted_ms[v]:.1f} "
                f"| {c.measured_ms[v]:.1f} | {c.error_pct[v]:+.1f} "
                f"| {c.measured_spread_pct[v]:.0f} | {c.load_ratio[v]:.2f} "
                f"| {c.adjusted_error_pct[v]:+.1f} |"
            )
            if v != "naive":
                errors.append(abs(c.error_pct[v]))
                adjusted.append(abs(c.adjusted_error_pct[v]))
    lines.append("")
    if errors:
        lines.append(
            f"median absolute error (variants other than naive): {np.median(errors):.1f}%; "
            f"load-adjusted: {np.median(adjusted):.1f}%"
        )
    right = sum(c.ranking_right for c in checks)
    adjusted_right = sum(c.adjusted_ranking_right for c in checks)
    lines.append(
        f"ranking right in {right} of {len(checks)} runs ({adjusted_right} after load adjustment)"
    )
    for c in checks:
        order = " < ".join(sorted(c.measured_ms, key=c.measured_ms.get))
        wrong = c.misordered(tuple(c.measured_ms))
        lines.append(
            f"{c.run.name}: measured {order}; pairs measured >25% apart and predicted the other "
            f"way (load-adjusted): {', '.join(f'{a}<{b}' for a, b in wrong) or 'none'}"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    runs = [Path(a) for a in argv]
    if not runs:
        print("usage: python -m tracekit.whatif.validate RUN [RUN ...]", file=sys.stderr)
        return 2
    sys.stdout.write(to_markdown(validate(runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
