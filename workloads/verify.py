"""Proof that every DDP variant trains exactly like one process on the whole batch.

    python -m workloads.verify --world-size 2 [--steps 5] [--variants naive flat ...]

Spawns ``--world-size`` CPU processes in a real gloo group (rendezvous on a free local port).
Each rank trains the tiny model for ``--steps`` steps with every chosen variant on its slice of
the global batch, and also trains a single-process reference on the full global batch (same
seed, same data, no process group involved). One line per variant reports the largest
absolute difference between any rank's final parameters and the reference's; the exit status
is 1 when any variant exceeds ``--tolerance``.

Precision and tolerance. A correct variant differs from the reference only in summation
order (two half-batch sums, then a cross-rank sum, vs one full-batch sum). AdamW divides each
gradient element by its own running RMS, which amplifies that rounding wherever an element is
~eps (1e-8) after cancellation: in float32 a correct run ends up to ~7e-5 off (worst of 30
seeds, tiny model, 5 steps), while real bugs (a missing average, corrupted data on one rank)
move parameters by ~3e-3..1e-2. So the check runs in float64 by default, where correct
variants land within ~1e-13 and the default tolerance 1e-8 separates both sides by five orders
of magnitude. ``--dtype float32`` checks the training precision itself, with tolerance 5e-4.
``--corrupt-rank-data`` gives the last rank different tokens: every variant must then fail.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import timedelta
from pathlib import Path

import torch
import torch.multiprocessing as mp

from tracekit.atomic import write_text
from tracekit.contract import VARIANTS
from workloads import distributed
from workloads.config import TrainConfig
from workloads.data import global_batch, inputs_and_targets, rank_slice
from workloads.model import MODEL_SIZES, lm_loss
from workloads.step import make_optimizer, train_step
from workloads.training import make_replica, seeded_model

DTYPES = {"float64": torch.float64, "float32": torch.float32}
DEFAULT_TOLERANCE = {"float64": 1e-8, "float32": 5e-4}
COLLECTIVE_TIMEOUT = timedelta(seconds=120)  # a hung variant fails instead of blocking CI
MODEL_SIZE = "tiny"
CPU = torch.device("cpu")


@dataclass(frozen=True)
class VerifyConfig:
    """What to check (the command-line flags, parsed)."""

    world_size: int = 2
    steps: int = 5
    variants: tuple[str, ...] = VARIANTS
    dtype: str = "float64"  # a key of DTYPES
    tolerance: float | None = None  # None: DEFAULT_TOLERANCE[dtype]
    batch_size: int = 8  # global batch
    context_length: int = 32
    bucket_mb: float = 0.25  # small, so the tiny model has many buckets
    seed: int = 0
    corrupt_rank_data: bool = False  # self-test: the last rank trains on other tokens
    json: Path | None = None  # also write the results here

    @property
    def limit(self) -> float:
        """The largest allowed |difference|."""
        return DEFAULT_TOLERANCE[self.dtype] if self.tolerance is None else self.tolerance

    def problem(self) -> str | None:
        """What is wrong with the flags, or None."""
        if self.world_size < 1:
            return f"--world-size must be at least 1, got {self.world_size}"
        if self.steps < 1:
            return f"--steps must be at least 1, got {self.steps}"
        if self.batch_size < 1 or self.batch_size % self.world_size:
            return (
                f"--batch-size {self.batch_size} must split evenly over --world-size "
                f"{self.world_size}"
            )
        if not self.bucket_mb > 0:
            return f"--bucket-mb must be positive, got {self.bucket_mb}"
        return None


DEFAULTS = VerifyConfig()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="workloads.verify", description=__doc__.split("\n\n")[0])
    d = DEFAULTS
    p.add_argument("--world-size", type=int, default=d.world_size)
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(d.variants))
    p.add_argument("--dtype", choices=tuple(DTYPES), default=d.dtype)
    p.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help=f"largest allowed |difference| (default by dtype: {DEFAULT_TOLERANCE})",
    )
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="global batch")
    p.add_argument("--context-length", type=int, default=d.context_length)
    p.add_argument(
        "--bucket-mb",
        type=float,
        default=d.bucket_mb,
        help="small, so the tiny model has many buckets",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--corrupt-rank-data",
        action="store_true",
        help="self-test: the last rank trains on other tokens, so every variant must fail",
    )
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    return p


def _tokens(config: VerifyConfig, step: int, seed: int) -> torch.Tensor:
    vocab = MODEL_SIZES[MODEL_SIZE].vocab_size
    return global_batch(step, config.batch_size, config.context_length, vocab, seed)


def reference_parameters(config: VerifyConfig) -> list[torch.Tensor]:
    """Final parameters of plain single-process training on the full global batch."""
    shape = MODEL_SIZES[MODEL_SIZE]
    model = seeded_model(shape, config.context_length, config.seed, CPU, DTYPES[config.dtype])
    optimizer = make_optimizer(model)
    for step in range(config.steps):
        inputs, targets = inputs_and_targets(_tokens(config, step, config.seed), CPU)
        lm_loss(model(inputs), targets).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()]


def max_abs_diff(params: Sequence[torch.Tensor], reference: Sequence[torch.Tensor]) -> float:
    """Largest absolute elementwise difference between two parameter lists."""
    # .item() is a device sync on a GPU; these are CPU tensors, so it is only a read.
    return max((a - b).abs().max().item() for a, b in zip(params, reference, strict=True))


def train_variant(config: VerifyConfig, variant: str, rank: distributed.Rank) -> dict:
    """Train ``variant`` on this rank; return its final-parameter gap and call counts."""
    train = TrainConfig(
        variant=variant,
        model_size=MODEL_SIZE,
        batch_size=config.batch_size,
        context_length=config.context_length,
        seed=config.seed,
        bucket_mb=config.bucket_mb,
    )
    replica = make_replica(train, CPU, DTYPES[config.dtype])
    corrupt = config.corrupt_rank_data and rank.rank == rank.world_size - 1
    calls = []
    for step in range(config.steps):
        tokens = _tokens(config, step, config.seed + 1 if corrupt else config.seed)
        inputs, targets = inputs_and_targets(rank_slice(tokens, rank.rank, rank.world_size), CPU)
        timing = train_step(
            step, replica.model, replica.strategy, replica.optimizer, inputs, targets
        )
        calls.append(timing.allreduce_calls)
    return {
        "params": [p.detach().clone() for p in replica.strategy.params],
        "allreduce_calls": calls,
        "strategy": replica.strategy.describe(),
    }


def _worker(rank: int, config: VerifyConfig, port: int, results: mp.SimpleQueue) -> None:
    torch.set_num_threads(1)  # one core per rank; same arithmetic in reference and variants
    me = distributed.init(rank, config.world_size, port, timeout=COLLECTIVE_TIMEOUT, cpu=True)
    try:
        reference = reference_parameters(config)
        report = {}
        for variant in config.variants:
            trained = train_variant(config, variant, me)
            diff = max_abs_diff(trained.pop("params"), reference)
            per_rank = distributed.gather_to_all(diff)
            report[variant] = {**trained, "max_abs_diff": max(per_rank), "per_rank": per_rank}
        if rank == 0:
            results.put(report)
    finally:
        distributed.shutdown()


def run(config: VerifyConfig) -> dict:
    """Spawn the group, train every variant; rank 0's report by variant."""
    results = mp.get_context("spawn").SimpleQueue()
    port = distributed.free_port()
    # The report is a few kB, well under a pipe's buffer, so rank 0's put() never blocks the
    # join; a worker that raises makes spawn() raise with its traceback.
    mp.spawn(_worker, args=(config, port, results), nprocs=config.world_size, join=True)
    return results.get()


def verdict_line(variant: str, entry: dict, tolerance: float) -> str:
    ok = entry["max_abs_diff"] <= tolerance
    calls = entry["allreduce_calls"][-1]
    return (
        f"{variant:<10} max |param - reference| = {entry['max_abs_diff']:.3e}"
        f"  (tolerance {tolerance:.0e}, {calls} all-reduce calls/step)  " + ("OK" if ok else "FAIL")
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = VerifyConfig(
        **{f.name: getattr(args, f.name) for f in fields(VerifyConfig) if f.name != "variants"},
        variants=tuple(args.variants),
    )
    message = config.problem()
    if message:
        print(f"workloads.verify: error: {message}", file=sys.stderr)
        return 2
    report = run(config)
    failed = False
    for variant in config.variants:
        entry = report[variant]
        entry["ok"] = entry["max_abs_diff"] <= config.limit
        failed |= not entry["ok"]
        print(verdict_line(variant, entry, config.limit), flush=True)
    if config.json is not None:
        results = {"dtype": config.dtype, "tolerance": config.limit, "variants": report}
        write_text(config.json, json.dumps(results, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
