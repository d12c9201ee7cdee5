"""Overlap, seen in CPU traces: naive's all-reduces start after backward, overlap's during it.

Both variants run under torchrun with 2 gloo ranks and ``--profile torch``. gloo records each
collective as a ``gloo:all_reduce`` user_annotation span on one of its worker threads (named
``pt_gloo_runloop``, though the trace sometimes still calls one "python": the name is set after
the thread starts), with its real duration; the training thread records our ``step#N`` and
``backward`` ranges. The traces are read here directly (gzip + json).
"""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.contract import BACKWARD, STEP_PREFIX
from workloads.model import MODEL_SIZES, TransformerLM
from workloads.profiling import trace_path

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300
WARMUP, STEPS = 1, 3
CONTEXT = 128  # long enough that backward takes tens of ms on one CPU core
GLOO_ALLREDUCE = "gloo:all_reduce"
GLOO_THREAD = "pt_gloo_runloop"


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """variant -> rank -> list of trace events, for naive and overlap."""
    root = tmp_path_factory.mktemp("overlap")
    found = {}
    for variant in ("naive", "overlap"):
        out = root / variant
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += ["--nproc-per-node=2", "-m", "workloads.train", f"--variant={variant}"]
        cmd += ["--model-size=tiny", f"--steps={STEPS}", f"--warmup-steps={WARMUP}"]
        cmd += ["--batch-size=8", f"--context-length={CONTEXT}", "--profile=torch"]
        cmd += [f"--out={out}"]
        proc = subprocess.run(
            cmd, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        found[variant] = {}
        for rank in (0, 1):
            with gzip.open(trace_path(out, rank), "rt") as f:
                found[variant][rank] = json.load(f)["traceEvents"]
    return found


def thread_names(events: list[dict]) -> dict[tuple, str]:
    return {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }


def per_step(events: list[dict]) -> list[dict]:
    """For every profiled step: its backward range and the all-reduce spans starting in it."""
    spans = [e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    steps = [e for e in spans if e["name"].startswith(STEP_PREFIX)]
    assert len(steps) == STEPS
    training_thread = {(e["pid"], e["tid"]) for e in steps}
    assert len(training_thread) == 1
    out = []
    for step in steps:
        start, end = step["ts"], step["ts"] + step["dur"]
        (backward,) = [e for e in spans if e["name"] == BACKWARD and start <= e["ts"] <= end]
        comms = [e for e in spans if e["name"] == GLOO_ALLREDUCE and start <= e["ts"] <= end]
        assert comms, f"no {GLOO_ALLREDUCE} in {step['name']}"
        assert not {(e["pid"], e["tid"]) for e in comms} & training_thread
        assert all(e["dur"] > 0 for e in comms)
        out.append(
            {
                "name": step["name"],
                "backward": (backward["ts"], backward["ts"] + backward["dur"]),
                "comms": comms,
            }
        )
    return out


@pytest.mark.slow
def test_gloo_spans_live_on_gloo_worker_threads(traces):
    """Never on the training thread (checked in per_step); named pt_gloo_runloop (in at least
    one of the four traces: a thread's name can be recorded before gloo sets it)."""
    carriers = set()
    for variant in traces.values():
        for events in variant.values():
            names = thread_names(events)
            threads = {(e["pid"], e["tid"]) for e in events if e.get("name") == GLOO_ALLREDUCE}
            carriers |= {names.get(t, "") for t in threads}
    assert any(GLOO_THREAD in name for name in carriers)


def parameter_sizes() -> list[int]:
    return sorted(p.numel() for p in TransformerLM(MODEL_SIZES["tiny"], CONTEXT).parameters())


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_naive_allreduces_all_start_after_backward(traces, rank):
    for step in per_step(traces["naive"][rank]):
        _, backward_end = step["backward"]
        starts = [e["ts"] for e in step["comms"]]
        assert min(starts) >= backward_end, step["name"]


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_overlap_first_allreduces_start_inside_backward(traces, rank):
    for step in per_step(traces["overlap"][rank]):
        backward_start, backward_end = step["backward"]
        first = min(e["ts"] for e in step["comms"])
        assert backward_start <= first < backward_end, step["name"]


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["naive", "overlap"])
def test_one_allreduce_per_parameter_with_its_shape(traces, variant):
    for rank in (0, 1):
        for step in per_step(traces[variant][rank]):
            sizes = sorted(math.prod(e["args"]["Input Dims"][0]) for e in step["comms"])
            assert sizes == parameter_sizes(), step["name"]
