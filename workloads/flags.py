"""Command-line flags of ``workloads.train`` and their validation."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import NoReturn

from workloads.ddp import BUCKETED, VARIANTS
from workloads.model import MODEL_SIZES
from workloads.profiling import PROFILE_NONE, PROFILERS

RUNS_DIR = Path("runs")
RUN_DIR_PATTERN = "train-{stamp}"  # default --out under RUNS_DIR
STAMP_FORMAT = "%Y%m%d-%H%M%S"
DEFAULT_BUCKET_MB = 25.0  # torch DDP's default bucket_cap_mb


class FlagError(Exception):
    """A bad flag, said in one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise FlagError(message)  # main() prints it as one line, without argparse's usage


def default_out(now: datetime) -> Path:
    """``runs/train-<timestamp>``."""
    return RUNS_DIR / RUN_DIR_PATTERN.format(stamp=now.strftime(STAMP_FORMAT))


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="workloads.train",
        description="Train a Transformer LM with one DDP variant and record its timing.",
    )
    p.add_argument("--variant", choices=VARIANTS, default=BUCKETED)
    p.add_argument("--model-size", choices=tuple(MODEL_SIZES), default="tiny")
    p.add_argument("--steps", type=int, default=10, help="measured steps")
    p.add_argument("--warmup-steps", type=int, default=3, help="unmeasured steps run first")
    p.add_argument("--batch-size", type=int, default=8, help="global batch, split over ranks")
    p.add_argument("--context-length", type=int, default=128)
    p.add_argument(
        "--bucket-mb",
        type=float,
        default=DEFAULT_BUCKET_MB,
        help="bucket size in MiB (bucketed, torch_ddp)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--out", type=Path, default=None, help="run directory (default: runs/train-<timestamp>)"
    )
    p.add_argument("--profile", choices=PROFILERS, default=PROFILE_NONE)
    p.add_argument(
        "--cuda-profiler-range",
        action="store_true",
        help="cudaProfilerStart/Stop around the measured steps (nsys --capture-range)",
    )
    return p


def problem(args: argparse.Namespace, world_size: int) -> str | None:
    """What is wrong with ``args`` for a job of ``world_size`` ranks, or None."""
    if args.steps < 1:
        return f"--steps must be at least 1, got {args.steps}"
    if args.warmup_steps < 0:
        return f"--warmup-steps must be at least 0, got {args.warmup_steps}"
    if args.batch_size < 1:
        return f"--batch-size must be at least 1, got {args.batch_size}"
    if args.batch_size % world_size:
        return f"--batch-size {args.batch_size} is not divisible by the world size {world_size}"
    if args.context_length < 1:
        return f"--context-length must be at least 1, got {args.context_length}"
    if not args.bucket_mb > 0:
        return f"--bucket-mb must be positive, got {args.bucket_mb}"
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        return f"--out {args.out} exists and is not a directory"
    return None


def parse(argv: Sequence[str] | None, world_size: int) -> argparse.Namespace:
    """Parsed and validated flags; raises :class:`FlagError`."""
    args = build_parser().parse_args(argv)
    message = problem(args, world_size)
    if message:
        raise FlagError(message)
    return args
