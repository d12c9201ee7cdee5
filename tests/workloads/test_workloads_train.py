"""End to end: `torchrun --nproc-per-node 2 -m workloads.train --profile torch` on the CPU,
then its record (JSON, CSV) and its per-rank gzipped Chrome traces."""

from __future__ import annotations

import csv
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.contract import PHASES, TIMING_CSV, TIMING_JSON
from tracekit.contract import TIMING_SUMMARY_CSV as SUMMARY_CSV
from workloads.profiling import trace_path
from workloads.record import TIMING_COLUMNS

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300
WARMUP, STEPS = 2, 3
MEASURED = list(range(WARMUP, WARMUP + STEPS))
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]


def train_args(variant: str, out: Path, *extra: str) -> list[str]:
    return [
        "-m",
        "workloads.train",
        f"--variant={variant}",
        "--model-size=tiny",
        f"--steps={STEPS}",
        f"--warmup-steps={WARMUP}",
        "--batch-size=4",
        "--context-length=32",
        "--bucket-mb=0.25",
        f"--out={out}",
        *extra,
    ]


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    kw.setdefault("cwd", REPO)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False, **kw)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("train") / "run"  # does not exist yet: train creates it
    proc = run([*TORCHRUN, "--nproc-per-node=2", *train_args("bucketed", out, "--profile=torch")])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, out


def load_trace(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


@pytest.mark.slow
def test_record_json(profiled):
    _, out = profiled
    rec = json.loads((out / TIMING_JSON).read_text())
    for key in (
        "variant",
        "model_size",
        "world_size",
        "backend",
        "flags",
        "model",
        "strategy",
        "environment",
        "steps",
        "per_rank",
        "summary",
        "traces",
    ):
        assert key in rec
    assert (rec["variant"], rec["world_size"], rec["backend"]) == ("bucketed", 2, "gloo")
    assert rec["steps"] == MEASURED
    assert rec["flags"]["batch_size"] == 4 and rec["flags"]["profile"] == "torch"
    assert rec["model"]["context_length"] == 32 and rec["model"]["parameter_tensors"] == 21
    assert rec["environment"]["torch"] and rec["environment"]["nccl"] is None
    buckets = rec["strategy"]["buckets"]
    assert buckets > 1
    assert [r["rank"] for r in rec["per_rank"]] == [0, 1]
    for rank in rec["per_rank"]:
        assert rank["device"] == "cpu" and rank["device_name"]
        phase_ms = rank["allreduce_phase_ms"]
        assert len(rank["step_ms"]) == len(phase_ms) == STEPS
        assert all(0 <= c < t for c, t in zip(phase_ms, rank["step_ms"], strict=True))
        assert rank["allreduce_calls"] == [buckets] * STEPS
    summary = rec["summary"]
    assert summary["allreduce_calls_per_step"] == buckets
    assert summary["ms_per_step"] > 0 and 0 <= summary["allreduce_phase_share_pct"] < 100
    assert rec["traces"] == ["rank-0.trace.json.gz", "rank-1.trace.json.gz"]


@pytest.mark.slow
def test_record_csv_and_table(profiled):
    proc, out = profiled
    rows = list(csv.DictReader((out / TIMING_CSV).open()))
    assert list(rows[0]) == list(TIMING_COLUMNS)
    assert sorted((int(r["rank"]), int(r["step"])) for r in rows) == [
        (rank, step) for rank in (0, 1) for step in MEASURED
    ]
    (summary,) = csv.DictReader((out / SUMMARY_CSV).open())
    assert summary["implementation"] == "bucketed" and summary["world_size"] == "2"
    header = next(line for line in proc.stdout.splitlines() if line.startswith("implementation"))
    assert "ms/iter" in header and "allreduce phase %" in header
    assert "all-reduce calls/step" in header
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no temp files left


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_trace_has_profiler_steps_and_phase_ranges(profiled, rank):
    _, out = profiled
    trace = load_trace(trace_path(out, rank))
    assert trace["distributedInfo"]["rank"] == rank
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    names = [e["name"] for e in spans if e.get("cat") == "user_annotation"]
    for step in MEASURED:
        assert names.count(f"ProfilerStep#{step}") == 1
        assert names.count(f"step#{step}") == 1
    assert f"step#{WARMUP - 1}" not in names  # warm-up steps are not recorded
    for phase in PHASES:
        assert names.count(phase) == STEPS
    assert "gloo:all_reduce" in names


def test_bad_flags_give_one_line_and_no_traceback(tmp_path):
    env = {**os.environ, "WORLD_SIZE": "2", "RANK": "0"}
    proc = run([sys.executable, *train_args("naive", tmp_path, "--batch-size=3")], env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "workloads.train: error: --batch-size 3 is not divisible by the world size 2"
    ]
    proc = run([sys.executable, "-m", "workloads.train", "--variant=bogus"])
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "invalid choice" in proc.stderr


@pytest.mark.slow
def test_single_process_run_uses_the_default_run_dir(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [a for a in train_args("flat", tmp_path, "--warmup-steps=0") if "--out" not in a]
    proc = run([sys.executable, *args], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = (tmp_path / "runs").glob("train-*")
    rec = json.loads((run_dir / TIMING_JSON).read_text())
    assert rec["world_size"] == 1 and rec["traces"] == []
    assert rec["steps"] == [0, 1, 2] and rec["summary"]["allreduce_calls_per_step"] == 1
