"""The settings of one training run, typed, and what makes them invalid."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

from tracekit.contract import BUCKETED, VARIANTS
from workloads.model import MODEL_SIZES

PROFILE_NONE, PROFILE_TORCH = "none", "torch"
PROFILERS = (PROFILE_NONE, PROFILE_TORCH)
DEFAULT_BUCKET_MB = 25.0  # torch DDP's default bucket_cap_mb


@dataclass(frozen=True)
class TrainConfig:
    """What ``workloads.train`` trains and records (its command-line flags, parsed)."""

    variant: str = BUCKETED  # one of tracekit.contract.VARIANTS
    model_size: str = "tiny"  # a key of workloads.model.MODEL_SIZES
    steps: int = 10  # measured steps
    warmup_steps: int = 3  # unmeasured steps run first
    batch_size: int = 8  # global batch, split over the ranks
    context_length: int = 128
    bucket_mb: float = DEFAULT_BUCKET_MB  # bucket size in MiB (bucketed, torch_ddp)
    seed: int = 0
    out: Path | None = None  # run directory (None: runs/train-<timestamp>)
    profile: str = PROFILE_NONE  # one of PROFILERS
    cuda_profiler_range: bool = False  # cudaProfilerStart/Stop around the measured steps

    def problem(self, world_size: int) -> str | None:
        """What is wrong with this config for a job of ``world_size`` ranks, or None."""
        if self.variant not in VARIANTS:
            return f"--variant must be one of {', '.join(VARIANTS)}, got {self.variant!r}"
        if self.model_size not in MODEL_SIZES:
            sizes = ", ".join(MODEL_SIZES)
            return f"--model-size must be one of {sizes}, got {self.model_size!r}"
        if self.profile not in PROFILERS:
            return f"--profile must be one of {', '.join(PROFILERS)}, got {self.profile!r}"
        if self.steps < 1:
            return f"--steps must be at least 1, got {self.steps}"
        if self.warmup_steps < 0:
            return f"--warmup-steps must be at least 0, got {self.warmup_steps}"
        if self.batch_size < 1:
            return f"--batch-size must be at least 1, got {self.batch_size}"
        if self.batch_size % world_size:
            return f"--batch-size {self.batch_size} is not divisible by the world size {world_size}"
        if self.context_length < 1:
            return f"--context-length must be at least 1, got {self.context_length}"
        if not (self.bucket_mb > 0 and math.isfinite(self.bucket_mb)):
            return f"--bucket-mb must be positive, got {self.bucket_mb}"
        if self.out is not None and self.out.exists() and not self.out.is_dir():
            return f"--out {self.out} exists and is not a directory"
        return None

    def record(self) -> dict:
        """JSON-ready form (for the timing record)."""
        return {**asdict(self), "out": None if self.out is None else str(self.out)}
