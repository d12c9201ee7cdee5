"""torch.profiler set-up: which steps are recorded and where each rank's trace goes.

The profiler is entered *before* the warm-up steps and ``prof.step()`` is called after every
step, so the profiler's ``ProfilerStep#k`` and our ``step#k`` carry the same k. Its schedule
skips the first W-1 warm-up steps (``wait``), warms up during the last one, and records exactly
the N measured steps (``active``), once. Each rank writes one gzipped Chrome trace.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from tracekit.atomic import replacing
from tracekit.contract import TRACE_NAME
from workloads.config import PROFILE_NONE

TRACE_SUFFIX = ".json.gz"  # torch gzips the export when the file name ends with .gz


def trace_path(out: Path, rank: int) -> Path:
    """Where ``rank`` writes its Chrome trace."""
    return out / TRACE_NAME.format(rank=rank)


def profile_schedule(warmup_steps: int, steps: int) -> dict[str, int]:
    """``torch.profiler.schedule`` arguments that record exactly the measured steps."""
    return {
        "wait": max(warmup_steps - 1, 0),
        "warmup": min(warmup_steps, 1),
        "active": steps,
        "repeat": 1,
    }


def write_trace(prof: profile, path: Path) -> None:
    """Export ``prof`` to ``path`` atomically: a temp ``.json.gz`` beside it, then rename."""
    with replacing(path, TRACE_SUFFIX) as tmp:
        prof.export_chrome_trace(str(tmp))


class NoProfiler:
    """Stands in for ``torch.profiler.profile`` when not profiling."""

    def __enter__(self) -> NoProfiler:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def step(self) -> None:
        pass


def make_profiler(
    kind: str, out: Path, rank: int, warmup_steps: int, steps: int
) -> profile | NoProfiler:
    """A profiler context for ``kind`` (one of ``workloads.config.PROFILERS``)."""
    if kind == PROFILE_NONE:
        return NoProfiler()
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    path = trace_path(out, rank)
    return profile(
        activities=activities,
        record_shapes=True,
        schedule=schedule(**profile_schedule(warmup_steps, steps)),
        on_trace_ready=lambda prof: write_trace(prof, path),
    )


class CudaProfilerRange:
    """``torch.cuda.profiler.start()/stop()`` around the measured steps, for
    ``nsys --capture-range=cudaProfilerApi``; does nothing when disabled or without CUDA."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and torch.cuda.is_available()

    def start(self) -> None:
        if self.enabled:
            torch.cuda.profiler.start()

    def stop(self) -> None:
        if self.enabled:
            torch.cuda.synchronize()  # hidden sync: let the last measured kernels land in range
            torch.cuda.profiler.stop()
