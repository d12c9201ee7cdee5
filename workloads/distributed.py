"""Joining and leaving the process group: backend, device, rank, parameter broadcast."""

from __future__ import annotations

import importlib
import os
import socket
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

LOCALHOST = "127.0.0.1"


@dataclass(frozen=True)
class Rank:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device


def backend_and_device(local_rank: int, cpu: bool = False) -> tuple[str, torch.device]:
    """NCCL on ``cuda:<local_rank>`` when CUDA is available (and not ``cpu``), else gloo."""
    if torch.cuda.is_available() and not cpu:
        return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


def free_port() -> int:
    """A TCP port that was free a moment ago (bind to port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCALHOST, 0))
        return s.getsockname()[1]


def env_world_size() -> int:
    """World size torchrun announced; 1 when started without it."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def env_rank() -> int:
    """Global rank torchrun announced; 0 when started without it."""
    return int(os.environ.get("RANK", "0"))


def init(
    rank: int | None = None,
    world_size: int | None = None,
    port: int | None = None,
    timeout: timedelta | None = None,
    cpu: bool = False,
) -> Rank:
    """Join the default process group.

    With no arguments, read torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``MASTER_ADDR``/``MASTER_PORT``), or, when it is absent, form a group of one on a free port.
    With arguments (spawned workers), rendezvous on ``tcp://127.0.0.1:<port>``. ``timeout``
    bounds every collective (None: torch's default); ``cpu`` forces gloo on the CPU.
    """
    if rank is None and "RANK" in os.environ:
        rank, world_size, local_rank = env_rank(), env_world_size(), int(os.environ["LOCAL_RANK"])
        init_method = "env://"
    else:
        rank, world_size = rank or 0, world_size or 1
        local_rank = rank
        init_method = f"tcp://{LOCALHOST}:{port or free_port()}"
    # torch._dynamo is imported lazily (first optimizer, first DDP); imported after the group
    # exists it keeps a reference to it, so destroy_process_group() cannot join gloo's worker
    # threads, and one of them may drop a Python-owned tensor during interpreter exit:
    # std::terminate, SIGABRT. Importing it first keeps shutdown clean.
    importlib.import_module("torch._dynamo")
    backend, device = backend_and_device(local_rank, cpu)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend,
        init_method=init_method,
        rank=rank,
        world_size=world_size,
        timeout=timeout,
        device_id=device if device.type == "cuda" else None,
    )
    return Rank(rank, world_size, local_rank, backend, device)


def broadcast_parameters(model: nn.Module, src: int = 0) -> None:
    """Overwrite every rank's parameters and buffers with rank ``src``'s."""
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor, src=src)


def agree(value: object, src: int = 0) -> object:
    """Rank ``src``'s ``value`` on every rank (e.g. a timestamped output directory)."""
    box = [value]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def gather_to_all(value: object) -> list[object]:
    """Every rank's ``value``, indexed by rank, on every rank."""
    out: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def shutdown() -> None:
    """Leave the process group if we joined one."""
    if dist.is_initialized():
        dist.destroy_process_group()
