"""Build small Chrome traces (torch.profiler layout) with hand-placed events, in µs."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOST_PID = 4242
MAIN_TID = 4242


@dataclass
class TraceBuilder:
    """Events of one rank. Kernels get a cudaLaunchKernel at ``launch`` with their correlation."""

    rank: int = 0
    world_size: int = 2
    backend: str = "nccl"
    events: list[dict[str, Any]] = field(default_factory=list)
    _corr: int = 1000

    def _x(self, cat: str, name: str, ts: float, dur: float, pid: int, tid: int, **args: Any):
        event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
        if args:
            event["args"] = args
        self.events.append(event)
        return self

    def step(self, n: int, start: float, end: float, tid: int = MAIN_TID) -> TraceBuilder:
        return self._x("user_annotation", f"ProfilerStep#{n}", start, end - start, HOST_PID, tid)

    def host_range(self, name: str, start: float, end: float, tid: int = MAIN_TID, **args: Any):
        return self._x("user_annotation", name, start, end - start, HOST_PID, tid, **args)

    def cpu_op(self, name: str, start: float, end: float, tid: int = MAIN_TID, **args: Any):
        return self._x("cpu_op", name, start, end - start, HOST_PID, tid, **args)

    def kernel(
        self,
        name: str,
        start: float,
        end: float,
        *,
        stream: int = 7,
        launch: float | None = None,
        device: int = 0,
        cat: str = "kernel",
        **args: Any,
    ) -> TraceBuilder:
        """A GPU kernel launched at ``launch`` (default: 1 µs before it starts)."""
        self._corr += 1
        at = start - 1 if launch is None else launch
        self._x("cuda_runtime", "cudaLaunchKernel", at, 0.5, HOST_PID, MAIN_TID,
                correlation=self._corr)  # fmt: skip
        return self._x(cat, name, start, end - start, device, stream, stream=stream,
                       correlation=self._corr, device=device, **args)  # fmt: skip

    def gpu_annotation(self, name: str, start: float, end: float, device: int = 0, **args: Any):
        return self._x("gpu_user_annotation", name, start, end - start, device, 7, **args)

    def to_dict(self) -> dict[str, Any]:
        meta = [
            {"ph": "M", "name": "process_name", "pid": HOST_PID, "tid": 0, "args": {"name": "py"}},
            {"ph": "M", "name": "thread_name", "pid": HOST_PID, "tid": MAIN_TID,
             "args": {"name": "main"}},
        ]  # fmt: skip
        return {
            "schemaVersion": 1,
            "distributedInfo": {
                "backend": self.backend,
                "rank": self.rank,
                "world_size": self.world_size,
            },
            "traceEvents": meta + self.events,
        }

    def write(self, path: Path) -> Path:
        text = json.dumps(self.to_dict())
        if path.name.endswith(".gz"):
            with gzip.open(path, "wt") as fh:
                fh.write(text)
        else:
            path.write_text(text)
        return path


# A hand-built GPU trace and a row picker, shared by the figure, CLI and hostile-input tests.

ALLREDUCE_OLD = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
ALLREDUCE_NEW = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def gpu_trace() -> TraceBuilder:
    """Two steps. Step 1 (launched before t=100):
    compute  A [10,30) s7, B [30,40) s7 (touches A), C [15,20) s8 (nested in A), G [55,58) s7
    comm     D [25,45) s20 (old NCCL name), E [42,50) s21 (new NCCL name)
    memcpy   F [50,60) on comm stream 20
    Step 2: compute H [110,120), comm I [115,130); K launched at 99 runs [140,150)."""
    t = TraceBuilder(rank=0, world_size=2)
    t.step(1, 0, 100).step(2, 100, 200)
    t.kernel("gemm_A", 10, 30, stream=7).kernel("gemm_B", 30, 40, stream=7)
    t.kernel("elementwise_C", 15, 20, stream=8).kernel("gemm_G", 55, 58, stream=7)
    t.kernel(ALLREDUCE_OLD, 25, 45, stream=20).kernel(ALLREDUCE_NEW, 42, 50, stream=21)
    t.kernel("Memcpy DtoD (Device -> Device)", 50, 60, stream=20, cat="gpu_memcpy", bytes=64)
    t.kernel("gemm_H", 110, 120, stream=7).kernel(ALLREDUCE_NEW, 115, 130, stream=20)
    t.kernel("late_K", 140, 150, stream=7, launch=99)
    return t


def one(a, **where):
    frame = a
    for col, val in where.items():
        frame = frame[frame[col] == val]
    assert len(frame) == 1, frame
    return frame.iloc[0]
