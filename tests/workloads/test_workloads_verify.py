"""`python -m workloads.verify` in real 2-process gloo groups: it passes, it can fail, and the
all-reduce calls each variant issues per step are the expected ones."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tracekit.contract import VARIANTS
from workloads.model import MODEL_SIZES, TransformerLM

REPO = Path(__file__).resolve().parents[2]
CONTEXT = 32
BUCKET_MB = 0.25
TIMEOUT_S = 300


def run_verify(*extra: str, json_out: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "workloads.verify", "--world-size", "2"]
    cmd += ["--context-length", str(CONTEXT), "--bucket-mb", str(BUCKET_MB), *extra]
    if json_out is not None:
        cmd += ["--json", str(json_out)]
    return subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )


def verdicts(stdout: str) -> dict[str, str]:
    """variant -> its verdict line, for lines that start with a variant name."""
    lines = [line for line in stdout.splitlines() if line.split(" ", 1)[0] in VARIANTS]
    return {line.split(" ", 1)[0]: line for line in lines}


@pytest.fixture(scope="module")
def passing(tmp_path_factory):
    out = tmp_path_factory.mktemp("verify") / "verify.json"
    proc = run_verify(json_out=out)
    return proc, json.loads(out.read_text()) if out.exists() else None


@pytest.mark.slow
def test_verify_passes_for_every_variant(passing):
    proc, results = passing
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == len(VARIANTS) == 5
    found = verdicts(proc.stdout)
    assert sorted(found) == sorted(VARIANTS)
    assert all(line.endswith("OK") for line in found.values())
    for variant in VARIANTS:
        entry = results["variants"][variant]
        assert entry["max_abs_diff"] <= results["tolerance"]
        assert len(entry["per_rank"]) == 2


@pytest.mark.slow
def test_verify_fails_when_one_rank_trains_on_other_data():
    proc = run_verify("--corrupt-rank-data", "--variants", "naive", "overlap", "torch_ddp")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = verdicts(proc.stdout)
    assert sorted(found) == ["naive", "overlap", "torch_ddp"]
    assert all(line.endswith("FAIL") for line in found.values())


def test_verify_rejects_a_batch_that_does_not_split():
    proc = run_verify("--batch-size", "3")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "workloads.verify: error: --batch-size 3 must split evenly over --world-size 2"
    ]


def expected_buckets(params: list[torch.nn.Parameter], cap_bytes: int) -> int:
    """Buckets, counted here independently: reverse parameter order, close a bucket before
    a parameter that would push it past the cap (a parameter bigger than the cap sits alone)."""
    count, filled = 0, 0
    for p in reversed(params):
        size = p.numel() * p.element_size()
        if count == 0 or (filled > 0 and filled + size > cap_bytes):
            count += 1
            filled = 0
        filled += size
    return count


@pytest.mark.slow
def test_allreduce_calls_per_step(passing):
    _, results = passing
    model = TransformerLM(MODEL_SIZES["tiny"], CONTEXT).to(torch.float64)  # verify's dtype
    assert results["dtype"] == "float64"
    params = list(model.parameters())
    calls = {v: results["variants"][v]["allreduce_calls"] for v in VARIANTS}
    assert calls["naive"] == [len(params)] * len(calls["naive"])
    assert calls["flat"] == [1] * len(calls["flat"])
    assert calls["overlap"] == [len(params)] * len(calls["overlap"])
    buckets = expected_buckets(params, int(BUCKET_MB * 1024 * 1024))
    assert 1 < buckets < len(params)  # the bucket size really groups parameters
    assert calls["bucketed"] == [buckets] * len(calls["bucketed"])
    assert results["variants"]["bucketed"]["strategy"]["buckets"] == buckets
    ddp = calls["torch_ddp"]
    assert all(c >= 1 for c in ddp) and len(set(ddp[1:])) == 1  # DDP rebuilds after step 0
