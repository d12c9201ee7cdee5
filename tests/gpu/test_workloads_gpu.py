"""GPU-only checks of workloads.train with NCCL: the XL model, CUDA kernels in the trace,
overlap of NCCL kernels with backward on 2 GPUs, NVTX ranges under nsys.

Skipped (with the reason) where CUDA is unavailable.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tracekit.contract import BACKWARD, PHASES, STEP_PREFIX, TIMING_JSON
from workloads.profiling import trace_path

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 600
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def train(out: Path, nproc: int, *flags: str) -> subprocess.CompletedProcess:
    cmd = [*TORCHRUN, f"--nproc-per-node={nproc}", "-m", "workloads.train", f"--out={out}"]
    proc = subprocess.run(
        [*cmd, *flags], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def events(out: Path, rank: int) -> list[dict]:
    with gzip.open(trace_path(out, rank), "rt") as f:
        return json.load(f)["traceEvents"]


def spans(evs: list[dict], cat: str) -> list[dict]:
    return [e for e in evs if e.get("ph") == "X" and e.get("cat") == cat]


@pytest.fixture(scope="module")
def xl_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("xl")
    flags = ["--variant=bucketed", "--model-size=xl", "--steps=1", "--warmup-steps=1"]
    flags += ["--batch-size=2", "--context-length=128", "--profile=torch"]
    train(out, 1, *flags)
    return out


def test_xl_record_names_nccl_and_the_gpu(xl_run):
    rec = json.loads((xl_run / TIMING_JSON).read_text())
    assert rec["backend"] == "nccl" and rec["world_size"] == 1
    assert rec["environment"]["nccl"] and rec["environment"]["torch_cuda"]
    assert rec["per_rank"][0]["device"] == "cuda:0"
    assert rec["per_rank"][0]["device_name"] == torch.cuda.get_device_name(0)
    assert rec["model"]["d_model"] == 1600 and rec["model"]["num_layers"] == 48


def test_xl_trace_has_kernels_and_our_ranges(xl_run):
    evs = events(xl_run, 0)
    assert len(spans(evs, "kernel")) > 100
    host = {e["name"] for e in spans(evs, "user_annotation")}
    assert {"ProfilerStep#1", f"{STEP_PREFIX}1", *PHASES} <= host
    device = {e["name"] for e in spans(evs, "gpu_user_annotation")}
    assert {"forward", "backward", "optimizer"} <= device  # ranges projected onto the GPU


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("variant", ["naive", "overlap"])
def test_nccl_kernels_against_backward_on_two_gpus(tmp_path, variant):
    flags = [f"--variant={variant}", "--model-size=small", "--steps=2", "--warmup-steps=1"]
    train(tmp_path, 2, *flags, "--batch-size=4", "--context-length=256", "--profile=torch")
    evs = events(tmp_path, 0)
    nccl = [e for e in spans(evs, "kernel") if "nccl" in e["name"].lower()]
    host = spans(evs, "user_annotation")
    for step in [e for e in host if e["name"].startswith(STEP_PREFIX)]:
        start, end = step["ts"], step["ts"] + step["dur"]
        (backward,) = [e for e in host if e["name"] == BACKWARD and start <= e["ts"] <= end]
        backward_end = backward["ts"] + backward["dur"]  # includes a compute-stream sync
        mine = [e["ts"] for e in nccl if start <= e["ts"] <= end]
        assert mine, step["name"]
        if variant == "naive":
            assert min(mine) >= backward_end, step["name"]
        else:
            assert min(mine) < backward_end, step["name"]


@pytest.mark.skipif(shutil.which("nsys") is None, reason="needs Nsight Systems (nsys)")
def test_nvtx_ranges_under_nsys(tmp_path):
    report = tmp_path / "prof"
    cmd = ["nsys", "profile", "--trace=cuda,nvtx", "--capture-range=cudaProfilerApi"]
    cmd += ["--capture-range-end=stop", "--force-overwrite=true", f"--output={report}"]
    cmd += [sys.executable, "-m", "workloads.train", "--variant=naive", "--model-size=tiny"]
    cmd += ["--steps=2", "--warmup-steps=1", "--batch-size=2", "--context-length=64"]
    cmd += ["--cuda-profiler-range", f"--out={tmp_path / 'run'}"]
    proc = subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = report.with_suffix(".nsys-rep")
    outputs = []
    for name in ("nvtx_sum", "nvtxsum"):  # the report's name in newer / older nsys
        stats = subprocess.run(
            ["nsys", "stats", f"--report={name}", "--format=csv", str(rep)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        outputs.append(stats.stdout)
    text = "\n".join(outputs)
    for name in (*PHASES, f"{STEP_PREFIX}1"):
        assert name in text, name
    assert f"{STEP_PREFIX}0" not in text  # the warm-up step is outside the capture range
