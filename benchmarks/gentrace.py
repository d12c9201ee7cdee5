"""Generated Chrome traces in torch.profiler's layout, for the benchmarks (not for tests).

    .venv/bin/python benchmarks/gentrace.py OUT.json.gz [--events 200000] [--rank 0]

Each step holds forward, backward and optimizer ranges; each kernel has its host op and its
cudaLaunchKernel (three events per kernel); every tenth kernel is an NCCL all-reduce with
collective arguments, on its own stream, overlapping the compute that follows it.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

HOST_PID, MAIN_TID = 4242, 4242
COMPUTE_STREAM, COMM_STREAM = 7, 20
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
GEMMS = ("ampere_sgemm_128x64_tn", "void at::native::vectorized_elementwise_kernel<4>")


def trace(events: int = 200_000, rank: int = 0, world_size: int = 8, steps: int = 10) -> dict:
    """A trace of about ``events`` timed events for ``rank``."""
    kernels = max(events // 3, steps * 10)
    per_step = kernels // steps
    out: list[dict[str, Any]] = []
    corr, t = 1, 1000.0
    for step in range(1, steps + 1):
        step_start = t
        phase_at = {0: "forward", per_step // 3: "backward", 9 * per_step // 10: "optimizer"}
        phase_start, phase = t, None
        for i in range(per_step):
            if i in phase_at:
                if phase is not None:
                    out.append(_x("user_annotation", phase, phase_start, t - phase_start))
                phase, phase_start = phase_at[i], t
            comm = i % 10 == 5
            name = ALLREDUCE if comm else GEMMS[i % 2]
            out.append(_x("cpu_op", "record_param_comms" if comm else "aten::mm", t, 4.0))
            out.append(_x("cuda_runtime", "cudaLaunchKernel", t + 1, 2.0, correlation=corr))
            args: dict[str, Any] = {"stream": COMM_STREAM if comm else COMPUTE_STREAM}
            if comm:
                args |= {
                    "Collective name": "allreduce",
                    "In msg nelems": 1 << 20,
                    "Out msg nelems": 1 << 20,
                    "dtype": "Float",
                    "Process Group Name": "0",
                    "Process Group Ranks": list(range(world_size)),
                }
            dur = 30.0 if comm else 8.0 + (i % 7)
            out.append(
                {"ph": "X", "cat": "kernel", "name": name, "pid": 0,
                 "tid": args["stream"], "ts": t + 5, "dur": dur,
                 "args": args | {"correlation": corr, "device": 0}}
            )  # fmt: skip
            corr += 1
            t += 6.0 if comm else dur + 2.0
        out.append(_x("user_annotation", phase or "optimizer", phase_start, t - phase_start))
        out.append(_x("user_annotation", f"ProfilerStep#{step}", step_start, t + 40 - step_start))
        t += 50.0
    meta = [
        {"ph": "M", "name": "process_name", "pid": HOST_PID, "tid": 0, "args": {"name": "py"}},
        {"ph": "M", "name": "thread_name", "pid": HOST_PID, "tid": MAIN_TID,
         "args": {"name": "main"}},
    ]  # fmt: skip
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size},
        "deviceProperties": [{"id": 0, "name": "generated GPU"}],
        "traceEvents": meta + out,
    }


def _x(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    event = {"ph": "X", "cat": cat, "name": name, "pid": HOST_PID, "tid": MAIN_TID}
    event |= {"ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def write(path: Path, doc: dict) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data, 6) if path.name.endswith(".gz") else data)
    return path


def with_rank(source: Path, rank: int, out: Path) -> Path:
    """A copy of the Chrome trace ``source`` whose distributedInfo says ``rank``."""
    raw = source.read_bytes()
    doc = json.loads(gzip.decompress(raw) if source.name.endswith(".gz") else raw)
    info = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
    doc["distributedInfo"] = info | {"rank": rank}
    return write(out, doc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rank", type=int, default=0)
    args = parser.parse_args()
    write(args.out, trace(args.events, args.rank))


if __name__ == "__main__":
    main()
