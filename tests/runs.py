"""Small synthetic run directories for the report, timeline and compare tests.

A run directory holds ``manifest.json`` and one sub-directory per variant with
``rank-<r>.trace.json.gz`` per rank, like ``run_profiles.sh`` writes. Times are µs.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.chrome_trace import TraceBuilder

EVIL = "<script>window.__x=1</script>"  # a kernel name that must show as text, never run
GEMM = "volta_sgemm_128x64_nn"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
# A C++ kernel name as long as real ones (tables shorten it, with the full name on hover).
ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
    "(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
    "FusedAdamMathFunctor<float, 4>, float, float>(at::native::TensorListMetadata<4>, "
    "at::native::FusedAdamMathFunctor<float, 4>, float*, double, bool)"
)
COMPUTE_STREAM, COMM_STREAM = 7, 20
MANIFEST = {
    "command": "scripts/run_profiles.sh --model-size tiny",
    "settings": {"steps": 4, "variants": ["naive", "overlap"], "note": "<b>not bold</b>"},
    "environment": {"torch": "2.4.0", "gpus": ["H100 <80GB>"]},
    "files": [{"path": "naive/rank-0.trace.json.gz", "bytes": 123}, {"path": "x", "bytes": 4}],
}


def _kernels(b: TraceBuilder, name: str, start: float, count: int, dur: float, gap: float):
    """``count`` kernels of ``dur`` µs, ``gap`` apart, on the compute stream."""
    t = start
    for _ in range(count):
        b.kernel(name, t, t + dur, stream=COMPUTE_STREAM)
        t += dur + gap
    return t


def gpu_rank(rank: int, variant: str, steps: int = 4, slow: float = 1.0, evil: bool = True):
    """One rank of a GPU run: forward, backward, allreduce and optimizer per step.

    naive: the all-reduce runs after backward; overlap: during backward. ``slow`` stretches
    every step's duration (for compare tests)."""
    b = TraceBuilder(rank=rank, world_size=2)
    t0 = 1000.0 + rank * 3
    for step in range(1, steps + 1):
        s = t0
        b.host_range("forward", s + 5, s + 205)
        _kernels(b, GEMM, s + 10, 10, 15, 5)
        if evil and rank == 0 and step == 2:
            b.kernel(EVIL, s + 206, s + 208, stream=COMPUTE_STREAM, launch=s + 204)
        b.host_range("backward", s + 210, s + 610)
        _kernels(b, "elementwise_kernel", s + 215, 20, 15, 5)
        if variant == "naive":
            b.host_range("allreduce", s + 610, s + 810)
            b.kernel(NCCL, s + 615, s + 800, stream=COMM_STREAM)
            opt = s + 810
        else:
            b.kernel(NCCL, s + 300, s + 400, stream=COMM_STREAM, launch=s + 290)
            b.kernel(NCCL, s + 450, s + 560, stream=COMM_STREAM, launch=s + 440)
            b.host_range("allreduce", s + 610, s + 620)
            opt = s + 620
        b.host_range("optimizer", opt, opt + 50)
        _kernels(b, ADAM, opt + 2, 2, 20, 3)
        end = (opt + 60 - s) * slow + s
        b.step(step, s, end)
        t0 = end + 5
    return b


def cpu_rank(rank: int, steps: int = 3) -> TraceBuilder:
    """One rank of a CPU (gloo) run: operators on the main thread, gloo spans on a worker."""
    b = TraceBuilder(rank=rank, world_size=2, backend="gloo")
    t0 = 500.0
    for step in range(1, steps + 1):
        s = t0
        b.host_range("forward", s, s + 100)
        b.cpu_op("aten::linear", s + 2, s + 90)
        b.host_range("backward", s + 100, s + 300)
        b.cpu_op("aten::mm", s + 102, s + 290)
        b.host_range("gloo:all_reduce", s + 150, s + 250, tid=9001)
        b.host_range("allreduce", s + 300, s + 320)
        b.cpu_op("c10d::allreduce_", s + 301, s + 319)
        b.host_range("gloo:all_reduce", s + 302, s + 318, tid=9002)
        b.step(step, s, s + 330)
        t0 = s + 340
    return b


def write_variant(directory: Path, variant: str, ranks: int = 2, **kwargs) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        gpu_rank(r, variant, **kwargs).write(directory / f"rank-{r}.trace.json.gz")
    return directory


def write_run(
    root: Path, variants: tuple[str, ...] = ("naive", "overlap"), manifest: bool = True, **kw
) -> Path:
    """A run directory with one sub-directory per variant (and a manifest)."""
    root.mkdir(parents=True, exist_ok=True)
    for v in variants:
        write_variant(root / v, v, **kw)
    if manifest:
        (root / "manifest.json").write_text(json.dumps(MANIFEST))
    return root


def write_cpu_run(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for r in range(2):
        cpu_rank(r).write(directory / f"rank-{r}.trace.json.gz")
    return directory
