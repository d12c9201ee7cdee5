"""Five ways to keep data-parallel replicas in sync, behind one interface.

Every variant averages gradients over the ranks (sum all-reduce, then divide by the world size)
and counts the all-reduce calls it issues in :attr:`Strategy.calls`. The training step calls

    strategy.start_step()        before forward
    loss.backward()              hooks of the overlapping variants launch all-reduces here
    strategy.sync_gradients()    inside the ``allreduce`` range: the blocking part of sync

Variants:
    naive      one blocking all-reduce per parameter, after backward
    flat       all gradients flattened into one buffer, ONE blocking all-reduce after backward
    overlap    one async all-reduce per parameter, launched from its post-accumulate-grad hook
    bucketed   async all-reduce per bucket of ~``bucket_mb`` MB, launched once the bucket is full
    torch_ddp  torch.nn.parallel.DistributedDataParallel, counted through a comm hook
"""

# No ``from __future__ import annotations`` here: DDP checks the comm hook's annotations at
# runtime and rejects string annotations.

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from tracekit.contract import (
    BUCKETED,
    FLAT,
    NAIVE,
    OVERLAP,
    TORCH_DDP,
    VARIANTS,
    plan_buckets,
)

MB = 1024 * 1024  # bucket sizes are MiB, like DDP's bucket_cap_mb


def _grad(param: nn.Parameter) -> torch.Tensor:
    """The parameter's gradient; zeros when backward did not reach it (same on every rank)."""
    if param.grad is None:
        param.grad = torch.zeros_like(param)
    return param.grad


def _trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


class Strategy:
    """Base: no hooks, nothing to sync. Subclasses override what they need."""

    name = ""

    def __init__(self) -> None:
        self.calls = 0  # all-reduce calls issued since start_step()
        self.world_size = 1

    def wrap(self, model: nn.Module) -> nn.Module:
        """Prepare ``model`` (hooks, wrappers); return the module to call forward on."""
        self.world_size = dist.get_world_size()
        self.params = _trainable(model)
        return model

    def start_step(self) -> None:
        self.calls = 0

    def sync_gradients(self) -> None:
        """Finish gradient averaging; runs inside the ``allreduce`` range."""

    def describe(self) -> dict:
        """Facts about this variant worth recording (bucket layout ...)."""
        return {}


class Naive(Strategy):
    """A blocking all-reduce per parameter, one after another, after backward."""

    name = NAIVE

    def sync_gradients(self) -> None:
        for param in self.params:
            grad = _grad(param)
            # Blocking: gloo returns when the sum is done; NCCL makes the current stream wait.
            dist.all_reduce(grad)
            self.calls += 1
            grad.div_(self.world_size)


class Flat(Strategy):
    """All gradients copied into one flat buffer, one blocking all-reduce, copied back."""

    name = FLAT

    def sync_gradients(self) -> None:
        grads = [_grad(p) for p in self.params]
        flat = _flatten_dense_tensors(grads)
        dist.all_reduce(flat)  # blocking, as in Naive
        self.calls += 1
        flat.div_(self.world_size)
        for grad, synced in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
            grad.copy_(synced)


class Overlap(Strategy):
    """An async all-reduce per parameter, launched the moment its gradient is accumulated."""

    name = OVERLAP

    def wrap(self, model: nn.Module) -> nn.Module:
        model = super().wrap(model)
        self._pending: list[tuple[dist.Work, torch.Tensor]] = []
        for param in self.params:
            param.register_post_accumulate_grad_hook(self._launch)
        return model

    def _launch(self, param: nn.Parameter) -> None:
        # Runs on the autograd thread during backward; returns without waiting.
        work = dist.all_reduce(param.grad, async_op=True)
        self._pending.append((work, param.grad))
        self.calls += 1

    def sync_gradients(self) -> None:
        for work, grad in self._pending:
            # Hidden sync: gloo blocks this thread until the sum is in; NCCL makes the current
            # stream wait for the communication stream (the CPU does not block).
            work.wait()
            grad.div_(self.world_size)
        self._pending.clear()


class Bucketed(Strategy):
    """Async all-reduce per bucket of gradients, launched as soon as the bucket is complete.

    Buckets are planned over the parameters in reverse registration order, which is roughly
    the order backward produces their gradients. Buckets launch strictly in index order (a
    complete bucket waits for earlier ones) so every rank issues the collectives in one order.
    """

    name = BUCKETED

    def __init__(self, bucket_mb: float) -> None:
        super().__init__()
        self.cap_bytes = max(1, int(bucket_mb * MB))

    def wrap(self, model: nn.Module) -> nn.Module:
        model = super().wrap(model)
        ready_order = self.params[::-1]
        sizes = [p.numel() * p.element_size() for p in ready_order]
        self.buckets = [[ready_order[i] for i in b] for b in plan_buckets(sizes, self.cap_bytes)]
        self._bucket_of = {id(p): b for b, ps in enumerate(self.buckets) for p in ps}
        self._pending: list[tuple[dist.Work, torch.Tensor, list[torch.Tensor]]] = []
        self._reset()
        for param in self.params:
            param.register_post_accumulate_grad_hook(self._on_grad_ready)
        return model

    def _reset(self) -> None:
        self._missing = [len(b) for b in self.buckets]
        self._next = 0  # index of the next bucket to launch

    def start_step(self) -> None:
        super().start_step()
        self._reset()

    def _on_grad_ready(self, param: nn.Parameter) -> None:
        self._missing[self._bucket_of[id(param)]] -= 1
        while self._next < len(self.buckets) and self._missing[self._next] == 0:
            self._launch(self._next)

    def _launch(self, index: int) -> None:
        grads = [_grad(p) for p in self.buckets[index]]
        flat = _flatten_dense_tensors(grads)
        work = dist.all_reduce(flat, async_op=True)  # returns at once
        self._pending.append((work, flat, grads))
        self.calls += 1
        self._next = index + 1

    def sync_gradients(self) -> None:
        while self._next < len(self.buckets):  # buckets holding parameters backward skipped
            self._launch(self._next)
        for work, flat, grads in self._pending:
            work.wait()  # hidden sync, as in Overlap.sync_gradients
            flat.div_(self.world_size)
            for grad, synced in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
                grad.copy_(synced)
        self._pending.clear()
        self._reset()

    def describe(self) -> dict:
        return {
            "bucket_cap_bytes": self.cap_bytes,
            "buckets": len(self.buckets),
            "bucket_bytes": [sum(p.numel() * p.element_size() for p in b) for b in self.buckets],
        }


def _counting_allreduce_hook(
    state: "TorchDDP", bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """DDP's default all-reduce hook (divide, async all-reduce), plus one to the count."""
    state.calls += 1
    return default_hooks.allreduce_hook(None, bucket)


class TorchDDP(Strategy):
    """PyTorch's DistributedDataParallel, the reference; buckets of ``bucket_mb`` MB.

    Its reducer launches bucket all-reduces during backward and waits for them in a callback at
    the end of backward, so its ``allreduce`` range is (nearly) empty: its communication cost
    shows up inside ``backward``. DDP rebuilds its buckets after the first step, so the call
    count of step 0 can differ from later steps.
    """

    name = TORCH_DDP

    def __init__(self, bucket_mb: float) -> None:
        super().__init__()
        self.bucket_mb = bucket_mb

    def wrap(self, model: nn.Module) -> nn.Module:
        super().wrap(model)
        device = next(model.parameters()).device
        ddp = DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=self.bucket_mb,
        )
        ddp.register_comm_hook(self, _counting_allreduce_hook)
        return ddp

    def describe(self) -> dict:
        return {"bucket_cap_mb": self.bucket_mb}


def make_strategy(variant: str, bucket_mb: float) -> Strategy:
    """A fresh, unwrapped strategy for ``variant`` (one of :data:`VARIANTS`)."""
    if variant == NAIVE:
        return Naive()
    if variant == FLAT:
        return Flat()
    if variant == OVERLAP:
        return Overlap()
    if variant == BUCKETED:
        return Bucketed(bucket_mb)
    if variant == TORCH_DDP:
        return TorchDDP(bucket_mb)
    raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
