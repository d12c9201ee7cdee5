"""Collective cost: latency plus bytes over bandwidth, fitted per collective type from the
collectives in the trace itself, with the fit's error."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_SIZES = 2  # distinct message sizes needed to separate latency from bandwidth


@dataclass(frozen=True)
class CostFit:
    """``time(bytes) = latency + bytes / bandwidth`` for one collective type."""

    collective: str  # normalised collective name ("allreduce", ...)
    latency_ns: float  # fitted time of an empty message (>= 0)
    ns_per_byte: float  # inverse bandwidth (> 0)
    samples: int  # collectives the fit saw
    sizes: int  # distinct message sizes among them
    median_error_pct: float | None  # median |predicted - measured| / measured over samples
    step_error_pct: float | None  # the same for each step's total (what predictions add up)
    note: str  # "" when the fit is sound, else why to doubt it

    def time_ns(self, nbytes: float) -> float:
        """Predicted duration of one collective of ``nbytes``."""
        return self.latency_ns + nbytes * self.ns_per_byte

    @property
    def bandwidth_gbps(self) -> float:
        return 1.0 / self.ns_per_byte if self.ns_per_byte > 0 else float("inf")

    @property
    def crossover_bytes(self) -> float:
        """Message size whose transfer time equals the latency: below it, latency dominates."""
        return self.latency_ns / self.ns_per_byte if self.ns_per_byte > 0 else 0.0


def fit(
    collective: str,
    nbytes: np.ndarray,
    durations_ns: np.ndarray,
    steps: np.ndarray | None = None,
) -> CostFit | None:
    """Fit ``latency + bytes / bandwidth`` to measured collectives (None without samples).

    Least squares over every sample (the same as fitting each distinct size's mean duration,
    weighted by its count), so that stragglers and waits for the peer, which every variant
    meets too, stay in the predicted mean. With fewer than MIN_SIZES sizes latency cannot be
    told from bandwidth: the fit assumes zero latency and says so in ``note``.
    """
    keep = (nbytes > 0) & (durations_ns > 0)
    b, d = nbytes[keep].astype(np.float64), durations_ns[keep].astype(np.float64)
    groups = None if steps is None else np.asarray(steps)[keep]
    if len(b) == 0:
        return None
    sizes, inverse, counts = np.unique(b, return_inverse=True, return_counts=True)
    medians = np.array([np.mean(d[inverse == i]) for i in range(len(sizes))])
    note = ""
    if len(sizes) < MIN_SIZES:
        latency, slope = 0.0, float(medians[0] / sizes[0])
        note = (
            f"only one message size ({_mb(sizes[0])}) in the trace: latency cannot be separated "
            "from bandwidth, so latency is taken as 0 and small-message variants come out "
            "optimistic"
        )
    else:
        latency, slope = _wls(sizes, medians, counts.astype(np.float64))
        if slope <= 0:
            # Durations do not grow with size (noise or a latency-bound range): bandwidth from
            # the largest size, latency from the rest.
            slope = float(medians[-1] / sizes[-1])
            latency = max(float(np.median(medians - slope * sizes)), 0.0)
            note = "durations do not grow with message size; bandwidth from the largest message"
        if latency < 0:
            latency = 0.0
            slope = float(np.sum(counts * medians * sizes) / np.sum(counts * sizes * sizes))
        if len(sizes) == MIN_SIZES:
            note = note or "two message sizes only: the line passes through both; error is rough"
    predicted = latency + slope * b
    error = float(np.median(np.abs(predicted - d) / d) * 100.0)
    step_error = None
    if groups is not None:
        _, at = np.unique(groups, return_inverse=True)
        want, got = np.bincount(at, predicted), np.bincount(at, d)
        step_error = float(np.median(np.abs(want - got) / got) * 100.0)
    return CostFit(
        collective=collective,
        latency_ns=float(latency),
        ns_per_byte=float(slope),
        samples=len(b),
        sizes=len(sizes),
        median_error_pct=error,
        step_error_pct=step_error,
        note=note,
    )


def _wls(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Weighted least-squares intercept and slope."""
    sw = w.sum()
    mx, my = (w * x).sum() / sw, (w * y).sum() / sw
    var = (w * (x - mx) ** 2).sum()
    slope = float((w * (x - mx) * (y - my)).sum() / var) if var > 0 else 0.0
    return float(my - slope * mx), slope


def _mb(nbytes: float) -> str:
    return f"{nbytes / 2**20:.2f} MB"
