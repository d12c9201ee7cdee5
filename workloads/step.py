"""The one training-step skeleton every DDP variant runs, with its timing.

Timing rules (CUDA): the clock is read only after ``torch.cuda.synchronize()`` at the start and
end of a step, so a step's time is its real device time. Around the ``allreduce`` phase only the
*current* (compute) stream is synchronised: that waits for backward's kernels but not for NCCL
work still in flight, so ``allreduce_phase_s`` is the communication left exposed after backward, not
communication already hidden under it. On the CPU nothing runs asynchronously but gloo.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from tracekit.contract import ALLREDUCE, BACKWARD, FORWARD, OPTIMIZER
from workloads.ddp import Strategy
from workloads.model import lm_loss
from workloads.phases import phase, step_range

LEARNING_RATE = 1e-3


@dataclass(frozen=True)
class StepTiming:
    """Wall-clock figures of one step on one rank."""

    step: int  # global step index
    step_s: float  # whole step
    allreduce_phase_s: float  # the ``allreduce`` phase
    allreduce_calls: int  # all-reduce calls the strategy issued in this step


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    """AdamW with fixed hyper-parameters (the same for every variant and the reference)."""
    return torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)


def _sync_device(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # hidden sync: waits for every stream, NCCL's included


def _sync_compute_stream(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()  # hidden sync: compute stream only


def train_step(
    step: int,
    model: nn.Module,
    strategy: Strategy,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
) -> StepTiming:
    """Forward, backward, gradient sync and optimizer step, each in its named range."""
    device = inputs.device
    _sync_device(device)
    start = time.perf_counter()
    strategy.start_step()
    with step_range(step):
        with phase(FORWARD):
            # The loss is never read back here: loss.item() would sync the device every step.
            loss = lm_loss(model(inputs), targets)
        with phase(BACKWARD):
            loss.backward()
            _sync_compute_stream(device)
        phase_start = time.perf_counter()
        with phase(ALLREDUCE):
            strategy.sync_gradients()
            _sync_compute_stream(device)
        phase_end = time.perf_counter()
        with phase(OPTIMIZER):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            _sync_device(device)
    end = time.perf_counter()
    return StepTiming(step, end - start, phase_end - phase_start, strategy.calls)
