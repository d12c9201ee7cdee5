"""The typed decoder (the default parser) and HTA's parser give the same tables and the same
analysis, on every shared real trace and on CPU (gloo) traces from the workloads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT
from tracekit.analysis import analyze
from tracekit.config import AnalysisConfig
from tracekit.load import load_file
from tracekit.load.chrome import read_events
from tracekit.load.discover import discover
from tracekit.output import to_json

FAST, HTA = AnalysisConfig(parser="fast"), AnalysisConfig(parser="hta")


def trace_dirs(root: Path) -> list[Path]:
    return sorted(d for d in root.iterdir() if d.is_dir())


def assert_same_tables(directory: Path) -> None:
    for group in discover([directory]):
        for place, path in enumerate(group.files):
            _, events_fast = read_events(path, "fast")
            _, events_hta = read_events(path, "hta")
            pd.testing.assert_frame_equal(events_fast, events_hta)
            fast = load_file(path, FAST, default_rank=place)
            hta = load_file(path, HTA, default_rank=place)
            assert [t.rank for t in fast] == [t.rank for t in hta]
            for a, b in zip(fast, hta, strict=True):
                pd.testing.assert_frame_equal(a.kernels, b.kernels)
                pd.testing.assert_frame_equal(a.ranges, b.ranges)
                assert (a.platform, a.world_size, a.meta) == (b.platform, b.world_size, b.meta)


def test_same_tables_on_every_shared_trace(shared_chrome: Path) -> None:
    for directory in trace_dirs(shared_chrome):
        assert_same_tables(directory)


def test_same_analysis_json_on_every_shared_trace(shared_chrome: Path) -> None:
    dirs = trace_dirs(shared_chrome)
    assert len(dirs) >= 8
    fast, hta = to_json(analyze(dirs, FAST)), to_json(analyze(dirs, HTA))
    assert fast == hta


def test_the_default_is_the_typed_decoder() -> None:
    assert AnalysisConfig().parser == "fast"
    with pytest.raises(ValueError, match="parser"):
        AnalysisConfig(parser="json")


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real CPU traces: torchrun, 2 gloo ranks, the overlap variant, tiny model."""
    out = tmp_path_factory.mktemp("gloo") / "overlap"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    cmd += ["-m", "workloads.train", "--variant=overlap", "--model-size=tiny", "--steps=3"]
    cmd += ["--warmup-steps=1", "--batch-size=4", "--context-length=32", "--profile=torch"]
    cmd += [f"--out={out}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.mark.slow
def test_same_tables_and_json_on_workload_cpu_traces(gloo_run: Path) -> None:
    assert_same_tables(gloo_run)
    fast, hta = analyze([gloo_run], FAST), analyze([gloo_run], HTA)
    assert to_json(fast) == to_json(hta)
    assert (fast.ranks["platform"] == "cpu").all() and (fast.ranks["comm_us"] > 0).all()
    for trace in load_file(next(gloo_run.glob("rank-0*")), FAST):
        comm = trace.kernels[trace.kernels["kind"] == "comm"]
        # one process group (distributedInfo.pg_config) holds every collective of this run
        assert set(comm["pg"]) == {"0 (default_pg)"} and set(comm["pg_size"]) == {2}
        assert set(comm["dtype"]) == {"float"}
