"""One rank's measured training run, and rank 0's record of the whole job."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from workloads import distributed
from workloads.config import PROFILE_NONE, TrainConfig
from workloads.data import global_batch, inputs_and_targets, rank_slice
from workloads.ddp import Strategy, make_strategy
from workloads.env import device_name, environment
from workloads.model import MODEL_SIZES, ModelConfig, TransformerLM
from workloads.profiling import CudaProfilerRange, make_profiler, trace_path
from workloads.record import build_record, results_table, summary_row, write_record
from workloads.step import StepTiming, make_optimizer, train_step


@dataclass(frozen=True)
class Replica:
    """This rank's model, ready to train: broadcast from rank 0, wrapped by its strategy."""

    model: nn.Module  # the module to call (may be a DDP wrapper)
    strategy: Strategy
    optimizer: torch.optim.Optimizer


def seeded_model(
    config: ModelConfig,
    context_length: int,
    seed: int,
    device: torch.device,
    dtype: torch.dtype = torch.float32,
) -> TransformerLM:
    """A fresh model whose initial parameters depend only on ``seed`` (and the device type).

    Parameters are created and initialised on ``device`` directly: initialising billions of
    them on the CPU first would take longer than the run.
    """
    torch.manual_seed(seed)
    with device:
        model = TransformerLM(config, context_length)
    return model.to(dtype=dtype)


def make_replica(
    config: TrainConfig, device: torch.device, dtype: torch.dtype = torch.float32
) -> Replica:
    """Build, broadcast (rank 0's parameters win) and wrap this rank's model."""
    shape = MODEL_SIZES[config.model_size]
    model = seeded_model(shape, config.context_length, config.seed, device, dtype)
    distributed.broadcast_parameters(model)
    strategy = make_strategy(config.variant, config.bucket_mb)
    wrapped = strategy.wrap(model)
    return Replica(wrapped, strategy, make_optimizer(wrapped))


def local_batch(
    config: TrainConfig, step: int, rank: distributed.Rank, vocab_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's inputs and targets for global step ``step``."""
    tokens = global_batch(step, config.batch_size, config.context_length, vocab_size, config.seed)
    return inputs_and_targets(rank_slice(tokens, rank.rank, rank.world_size), rank.device)


def run_training(
    config: TrainConfig, rank: distributed.Rank, out: Path, replica: Replica
) -> list[StepTiming]:
    """Warm-up steps, then measured steps; returns the measured steps' timings."""
    vocab = MODEL_SIZES[config.model_size].vocab_size
    cuda_range = CudaProfilerRange(config.cuda_profiler_range)
    measured: list[StepTiming] = []
    total = config.warmup_steps + config.steps
    warmup = config.warmup_steps
    with make_profiler(config.profile, out, rank.rank, warmup, config.steps) as prof:
        for step in range(total):
            if step == warmup:
                cuda_range.start()
            inputs, targets = local_batch(config, step, rank, vocab)
            timing = train_step(
                step, replica.model, replica.strategy, replica.optimizer, inputs, targets
            )
            if step >= warmup:
                measured.append(timing)
            prof.step()
        cuda_range.stop()
    return measured


def model_info(config: ModelConfig, model: nn.Module, context_length: int) -> dict:
    """Model config plus its parameter counts."""
    params = [p for p in model.parameters() if p.requires_grad]
    return {
        **asdict(config),
        "context_length": context_length,
        "parameters": sum(p.numel() for p in params),
        "parameter_tensors": len(params),
    }


def publish(
    config: TrainConfig,
    rank: distributed.Rank,
    out: Path,
    replica: Replica,
    measured: list[StepTiming],
) -> dict | None:
    """Gather every rank's timings; rank 0 writes the record, prints the table, returns it."""
    env = environment()
    me = {
        "rank": rank.rank,
        "hostname": env["hostname"],
        "device": str(rank.device),
        "device_name": device_name(rank.device),
    }
    gathered = distributed.gather_to_all((me, measured))
    if rank.rank != 0:
        return None
    record = build_record(
        flags={**config.record(), "out": str(out)},
        model=model_info(MODEL_SIZES[config.model_size], replica.model, config.context_length),
        strategy={"variant": config.variant, **replica.strategy.describe()},
        backend=rank.backend,
        world_size=rank.world_size,
        environment=env,
        ranks=[info for info, _ in gathered],
        per_rank=[timings for _, timings in gathered],
        traces=(
            [trace_path(out, r).name for r in range(rank.world_size)]
            if config.profile != PROFILE_NONE
            else []
        ),
    )
    paths = write_record(out, record)
    print(results_table([summary_row(record)]))
    print("wrote " + ", ".join(str(p) for p in paths))
    return record
