"""The software and hardware a run happened on, as a JSON-ready dict.

``python -m workloads.env`` prints it; training records embed it.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from importlib import metadata
from pathlib import Path

import torch
import torch.distributed as dist

from workloads.distributed import backend_and_device


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def nccl_version() -> str | None:
    """NCCL version torch was built with, e.g. "2.21.5"; None without CUDA."""
    if not torch.cuda.is_available():
        return None
    try:
        version = torch.cuda.nccl.version()
    except (RuntimeError, AttributeError):
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


CPUINFO = Path("/proc/cpuinfo")


def cpu_name() -> str:
    """The CPU's model name (Linux), else what ``platform`` knows."""
    if CPUINFO.exists():
        for line in CPUINFO.read_text(errors="replace").splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "cpu"


def device_name(device: torch.device) -> str:
    """Human name of ``device``: the GPU's model, or the CPU's."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_name()


def environment() -> dict:
    """Versions, devices and host facts of this process."""
    cuda = torch.cuda.is_available()
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "nccl": nccl_version(),
        "default_backend": backend_and_device(0)[0],
        "gloo_available": dist.is_gloo_available(),
        "nccl_available": dist.is_nccl_available(),
        "nvtx": _package_version("nvtx"),
        "cpu_count": os.cpu_count(),
        "device_count": torch.cuda.device_count() if cuda else 0,
        "devices": (
            [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            if cuda
            else [cpu_name()]
        ),
    }


def main() -> None:
    print(json.dumps(environment(), indent=2))


if __name__ == "__main__":
    main()
