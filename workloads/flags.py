"""Command-line flags of ``workloads.train``, parsed into a :class:`TrainConfig`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from pathlib import Path
from typing import NoReturn

from tracekit.contract import VARIANTS
from workloads.config import PROFILERS, TrainConfig
from workloads.model import MODEL_SIZES

RUNS_DIR = Path("runs")
RUN_DIR_PATTERN = "train-{stamp}"  # default --out under RUNS_DIR
STAMP_FORMAT = "%Y%m%d-%H%M%S"
DEFAULTS = TrainConfig()


class FlagError(Exception):
    """A bad flag, said in one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise FlagError(message)  # main() prints it as one line, without argparse's usage


def default_out(now: datetime) -> Path:
    """``runs/train-<timestamp>``."""
    return RUNS_DIR / RUN_DIR_PATTERN.format(stamp=now.strftime(STAMP_FORMAT))


def build_parser() -> argparse.ArgumentParser:
    d = DEFAULTS
    p = _Parser(
        prog="workloads.train",
        description="Train a Transformer LM with one DDP variant and record its timing.",
    )
    p.add_argument("--variant", choices=VARIANTS, default=d.variant)
    p.add_argument("--model-size", choices=tuple(MODEL_SIZES), default=d.model_size)
    p.add_argument("--steps", type=int, default=d.steps, help="measured steps")
    p.add_argument(
        "--warmup-steps", type=int, default=d.warmup_steps, help="unmeasured steps run first"
    )
    p.add_argument(
        "--batch-size", type=int, default=d.batch_size, help="global batch, split over ranks"
    )
    p.add_argument("--context-length", type=int, default=d.context_length)
    p.add_argument(
        "--bucket-mb",
        type=float,
        default=d.bucket_mb,
        help="bucket size in MiB (bucketed, torch_ddp)",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--out", type=Path, default=d.out, help="run directory (default: runs/train-<timestamp>)"
    )
    p.add_argument("--profile", choices=PROFILERS, default=d.profile)
    p.add_argument(
        "--cuda-profiler-range",
        action="store_true",
        help="cudaProfilerStart/Stop around the measured steps (nsys --capture-range)",
    )
    return p


def parse(argv: Sequence[str] | None, world_size: int) -> TrainConfig:
    """Parsed and validated flags; raises :class:`FlagError`."""
    args = build_parser().parse_args(argv)
    config = TrainConfig(**{f.name: getattr(args, f.name) for f in fields(TrainConfig)})
    message = config.problem(world_size)
    if message:
        raise FlagError(message)
    return config
