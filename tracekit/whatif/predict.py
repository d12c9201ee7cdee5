"""The facade: a trace, variant directory or run directory in; per-variant predictions, the
measured figures beside them when the run holds them, and a bucket-size recommendation out."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tracekit.errors import TracekitError
from tracekit.whatif.costmodel import CostFit, fit
from tracekit.whatif.extract import GRADIENT_COLLECTIVE, Extracted, extract
from tracekit.whatif.schedule import MB, Costs, Replay, Variant, replay

BUCKET_MB = (1, 5, 25, 100)  # bucket sizes predicted by default
VARIANT_NAMES = ("naive", "flat", "overlap", "bucketed")
# Slow-down of compute and of gloo communication while they run at once on a CPU: the median
# of the factors measured in this project's four CPU validation runs (2.28, 1.79, 1.18, 1.00;
# README, "What-if"); used when the input holds no naive + overlap pair to measure it from.
CPU_CONTENTION = 1.5
GPU_CONTENTION = 1.0  # assumed: NCCL on its own stream does not slow compute kernels
MAX_CONTENTION = 4.0


@dataclass(frozen=True)
class Prediction:
    """One variant's predicted step, averaged over the headline steps (µs)."""

    variant: str  # label: "naive", "bucketed 25 MB", ...
    name: str  # naive, flat, overlap or bucketed
    bucket_mb: float | None  # bucketed only
    step_us: float  # predicted step time
    comm_us: float  # predicted communication time
    exposed_comm_us: float  # communication nothing hides
    overlap_pct: float | None  # share of communication hidden behind compute
    collectives: int  # gradient collectives per step
    speedup: float  # measured step time of the input over this prediction
    measured_step_us: float | None  # this variant measured in the same run, when present
    error_pct: float | None  # 100 * (predicted - measured) / measured
    per_step: tuple[dict, ...]  # per step: step, step_us, comm_us, exposed_comm_us, overlap_pct


@dataclass(frozen=True)
class WhatIf:
    """Predictions from one rank's trace."""

    source: Path  # the trace predicted from
    rank: int  # its rank
    platform: str  # cpu or gpu
    measured_variant: str  # the variant the trace shows
    measured_step_us: float  # its mean step time over the headline steps
    steps: tuple[int, ...]  # the headline steps predicted
    cost: CostFit  # the all-reduce cost model
    contention: float  # compute/comm slow-down while both run
    contention_source: str  # where that factor came from
    costs: Costs  # every per-operation cost used
    predictions: tuple[Prediction, ...]  # one per variant
    recommendation: str  # the bucket size to use, e.g. "25 MB"
    reason: str  # why
    notes: tuple[str, ...] = field(default_factory=tuple)  # caveats, each one line


def predict_path(
    path: Path,
    *,
    from_variant: str | None = None,
    rank: int | None = None,
    contention: float | None = None,
    bucket_mb: tuple[float, ...] = BUCKET_MB,
    measured: bool | dict[str, float] = True,
) -> WhatIf:
    """Predict from ``path``: a trace file, a directory of per-rank traces (one variant), or a
    run directory (the ``from_variant`` sub-directory, default naive). When the run holds the
    other variants (and ``measured``), their measured step times go beside the predictions;
    ``measured`` may also give them (µs by variant) when the caller has already analysed them."""
    trace, variant_dir, run_dir = _resolve(Path(path), from_variant, rank)
    named = variant_dir.name if variant_dir is not None else None
    data = extract(trace, rank, named if named in VARIANT_NAMES else None)
    notes = list(data.notes)
    factor, source = _contention(data, run_dir, rank, contention)
    if isinstance(measured, dict):
        measured_steps = measured
    else:
        measured_steps = _measured(run_dir) if (measured and run_dir is not None) else {}
    sizes = tuple(bucket_mb)
    run_bucket = _run_bucket_mb(run_dir)
    if run_bucket is not None and run_bucket not in sizes:
        sizes = tuple(sorted((*sizes, run_bucket)))
    return predict(data, factor, source, sizes, measured_steps, run_bucket, notes)


def predict(
    data: Extracted,
    contention: float,
    contention_source: str,
    bucket_mb: tuple[float, ...] = BUCKET_MB,
    measured_steps: dict[str, float] | None = None,
    run_bucket_mb: float | None = None,
    notes: list[str] | None = None,
) -> WhatIf:
    """The pure part of ``predict_path``: predictions from extracted data."""
    notes = list(notes if notes is not None else data.notes)
    measured_steps = measured_steps or {}
    grad = data.collectives[data.collectives["collective"] == GRADIENT_COLLECTIVE]
    # A collective that ran beside compute was slowed by contention: fit its own cost.
    alone = grad["duration_ns"].to_numpy(np.float64) - grad["compute_overlap_ns"].to_numpy(
        np.float64
    ) * (1.0 - 1.0 / contention)
    cost = fit(GRADIENT_COLLECTIVE, grad["bytes"].to_numpy(), alone, grad["step"].to_numpy())
    if cost is None:
        raise TracekitError("no all-reduce with a known size: no cost model to predict with",
                            data.source)  # fmt: skip
    costs = Costs(
        comm=cost,
        copy_ns_per_byte=data.copy_ns_per_byte or 0.0,
        launch_ns=data.launch_ns,
        wait_ns=_wait_ns(data),
        contention=contention,
    )
    variants = [Variant(n) for n in VARIANT_NAMES[:3]]
    variants += [Variant("bucketed", int(mb * MB)) for mb in bucket_mb]
    measured_us = float(np.mean([s.measured_ns for s in data.steps])) / 1e3
    predictions = []
    for v in variants:
        replays = [replay(s, v, costs) for s in data.steps]
        key = v.name if v.name != "bucketed" else _bucket_key(v, run_bucket_mb)
        predictions.append(_prediction(v, replays, data, measured_us, measured_steps.get(key)))
    best, reason = recommend(predictions, cost, data)
    return WhatIf(
        source=data.source,
        rank=data.rank,
        platform=data.platform,
        measured_variant=data.variant,
        measured_step_us=measured_us,
        steps=tuple(s.step for s in data.steps),
        cost=cost,
        contention=contention,
        contention_source=contention_source,
        costs=costs,
        predictions=tuple(predictions),
        recommendation=best,
        reason=reason,
        notes=tuple(notes),
    )


def _bucket_key(v: Variant, run_bucket_mb: float | None) -> str:
    """The measured variant a bucketed prediction compares with: the run's bucket size."""
    if run_bucket_mb is not None and v.bucket_bytes == int(run_bucket_mb * MB):
        return "bucketed"
    return ""


def _prediction(
    v: Variant,
    replays: list[Replay],
    data: Extracted,
    measured_us: float,
    measured_step_us: float | None,
) -> Prediction:
    step = float(np.mean([r.step_ns for r in replays])) / 1e3
    comm = float(np.mean([r.comm_ns for r in replays])) / 1e3
    exposed = float(np.mean([r.exposed_ns for r in replays])) / 1e3
    per_step = tuple(
        {
            "step": s.step,
            "step_us": r.step_ns / 1e3,
            "comm_us": r.comm_ns / 1e3,
            "exposed_comm_us": r.exposed_ns / 1e3,
            "overlap_pct": r.overlap_pct,
        }
        for s, r in zip(data.steps, replays, strict=True)
    )
    error = None
    if measured_step_us:
        error = 100.0 * (step - measured_step_us) / measured_step_us
    return Prediction(
        variant=v.label,
        name=v.name,
        bucket_mb=None if v.bucket_bytes is None else v.bucket_bytes / MB,
        step_us=step,
        comm_us=comm,
        exposed_comm_us=exposed,
        overlap_pct=100.0 * (comm - exposed) / comm if comm > 0 else None,
        collectives=replays[0].collectives,
        speedup=measured_us / step if step > 0 else float("nan"),
        measured_step_us=measured_step_us,
        error_pct=error,
        per_step=per_step,
    )


def recommend(predictions: list[Prediction], cost: CostFit, data: Extracted) -> tuple[str, str]:
    """The bucket size with the fastest predicted step, and why."""
    bucketed = [p for p in predictions if p.name == "bucketed"]
    best = min(bucketed, key=lambda p: p.step_us)
    sizes = np.concatenate([s.sizes for s in data.steps[:1]])
    cross = cost.crossover_bytes
    small = int((sizes < cross).sum())
    per_grad = next(p for p in predictions if p.name == "overlap")
    parts = [
        f"{best.bucket_mb:g} MB: fastest predicted ({best.step_us / 1e3:.1f} ms/step, "
        f"{best.collectives} all-reduces, {best.overlap_pct or 0:.0f}% hidden)",
        f"latency {cost.latency_ns / 1e3:.0f} µs = transfer time of {cross / MB:.2f} MB; "
        f"{small} of {len(sizes)} gradients are smaller, so one all-reduce each "
        f"(overlap, {per_grad.step_us / 1e3:.1f} ms) is "
        + ("latency-bound" if small > len(sizes) / 2 else "mostly bandwidth-bound"),
    ]
    biggest = max(bucketed, key=lambda p: p.bucket_mb or 0)
    if biggest is not best:
        parts.append(
            f"{biggest.bucket_mb:g} MB buckets start communicating later "
            f"({biggest.step_us / 1e3:.1f} ms)"
        )
    return f"{best.bucket_mb:g} MB", "; ".join(parts)


def _wait_ns(data: Extracted) -> float:
    """Host time per blocking wait in the sync phase, from the measured trace: the sync
    phase's host time less its copies and collective calls, per collective waited on."""
    copies = {"naive": 1, "overlap": 1, "flat": 3, "bucketed": 2}.get(data.variant, 1)
    calls = {"naive": 1.0, "flat": 1.0}.get(data.variant, 0.0)
    rate = data.copy_ns_per_byte or 0.0
    per_step = []
    for s in data.steps:
        if s.sync_waited == 0:
            continue
        launched = calls * (s.sync_waited if data.variant == "naive" else 1)
        rest = s.sync_host_ns - copies * rate * s.sync_bytes - launched * data.launch_ns
        per_step.append(max(rest, 0.0) / s.sync_waited)
    return float(np.median(per_step)) if per_step else 0.0


def contention_factor(naive: Extracted, overlap: Extracted) -> float | None:
    """Slow-down while compute and communication run at once, from a naive and an overlap
    trace of the same model: overlap's backward is longer than naive's by the compute lost
    while communication ran alongside (less its extra collective calls). With processor
    sharing, lost = overlapped * (1 - 1/f). Naive's backward is first scaled by the ratio of
    the two forward passes (the same work in both), so that a machine busier during one
    variant than the other is not taken for contention. None when overlap's backward hid
    nothing."""
    load = float(np.median([s.pre_ns for s in overlap.steps])) / max(
        float(np.median([s.pre_ns for s in naive.steps])), 1.0
    )
    b_naive = load * float(np.median([s.backward_ns for s in naive.steps]))
    b_over = float(np.median([s.backward_ns for s in overlap.steps]))
    hidden = float(np.median([s.backward_overlap_ns for s in overlap.steps]))
    calls = float(np.median([len(s.sizes) for s in overlap.steps])) * overlap.launch_ns
    if hidden <= 0:
        return None
    lost = min(max(b_over - b_naive - calls, 0.0) / hidden, 1.0 - 1.0 / MAX_CONTENTION)
    return 1.0 / (1.0 - lost)


def _contention(
    data: Extracted, run_dir: Path | None, rank: int | None, given: float | None
) -> tuple[float, str]:
    if given is not None:
        return given, "given (--contention)"
    if data.platform == "gpu":
        return GPU_CONTENTION, "assumed for GPUs (NCCL on its own stream)"
    if run_dir is not None and (run_dir / "naive").is_dir() and (run_dir / "overlap").is_dir():
        try:
            pair = [extract(_rank_file(run_dir / v, rank), rank, v) for v in ("naive", "overlap")]
        except TracekitError:
            pair = []
        factor = contention_factor(*pair) if pair else None
        if factor is not None:
            return factor, "measured from this run's naive and overlap traces"
    return CPU_CONTENTION, "default for CPU runs (measured over the README's validation runs)"


def _resolve(
    path: Path, from_variant: str | None, rank: int | None
) -> tuple[Path, Path | None, Path | None]:
    """(trace file, its variant directory or None, the run directory or None)."""
    if path.is_file():
        parent = path.parent
        run = parent.parent if parent.name in (*VARIANT_NAMES, "torch_ddp") else None
        return path, parent, run
    if not path.is_dir():
        raise TracekitError("no such file or directory", path)
    if _traces(path):
        run = path.parent if path.name in (*VARIANT_NAMES, "torch_ddp") else None
        return _rank_file(path, rank), path, run
    choice = from_variant or "naive"
    sub = path / choice
    if not sub.is_dir() or not _traces(sub):
        if from_variant is None:
            found = [d for d in sorted(path.iterdir()) if d.is_dir() and _traces(d)]
            if found:
                return _rank_file(found[0], rank), found[0], path
        raise TracekitError(f"no traces of variant {choice!r} in this run directory", path)
    return _rank_file(sub, rank), sub, path


def _traces(directory: Path) -> list[Path]:
    return sorted(
        p
        for p in directory.iterdir()
        if p.is_file() and p.name.endswith((".json", ".json.gz")) and "rank" in p.name.lower()
    ) or sorted(
        p
        for p in directory.iterdir()
        if p.is_file()
        and p.name.endswith((".json", ".json.gz"))
        and p.name not in ("manifest.json", "summary.json", "timing.json")
    )


def _rank_file(directory: Path, rank: int | None) -> Path:
    files = _traces(directory)
    if not files:
        raise TracekitError("no Chrome traces here", directory)
    if rank is not None:
        named = [p for p in files if p.name.startswith(f"rank-{rank}.")]
        if named:
            return named[0]
    return files[0]


def _measured(run_dir: Path) -> dict[str, float]:
    """Measured mean step time (µs) of each variant in the run: mean over the headline steps
    of the slowest rank's step."""
    from tracekit.analysis import analyze

    out: dict[str, float] = {}
    for name in VARIANT_NAMES:
        sub = run_dir / name
        if not sub.is_dir() or not _traces(sub):
            continue
        try:
            a = analyze([sub])
        except TracekitError:
            continue
        steps = a.steps
        if steps.empty:
            continue
        last = steps["step"].max()
        head = steps[steps["step"] != last] if steps["step"].nunique() > 1 else steps
        out[name] = float(head.groupby("step")["step_us"].max().mean())
    return out


def _run_bucket_mb(run_dir: Path | None) -> float | None:
    """The run's --bucket-mb, from its manifest."""
    if run_dir is None:
        return None
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text())
        return float(manifest["settings"]["bucket_mb"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
