"""Engines: in-process, a local process pool (also from a plain script with no __main__
guard) and a real Dask LocalCluster of two worker processes give identical results."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.chrome_trace import TraceBuilder
from tracekit import engine, output
from tracekit.analysis import TaskDone, analyze
from tracekit.config import AnalysisConfig
from tracekit.errors import TracekitError
from tracekit.rankwork import FileTask, analyze_file

ROOT = Path(__file__).resolve().parents[1]
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def write_ranks(folder: Path, n: int = 3, steps: int = 3) -> Path:
    """``n`` ranks of ``steps`` steps: a GEMM and an all-reduce (rank-dependent length) each."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(n):
        t = TraceBuilder(rank=rank, world_size=n)
        for s in range(steps):
            base = 100 * s
            t.step(s + 1, base, base + 100)
            t.kernel("sgemm_128x64", base + 5, base + 40)
            args = {"Collective name": "allreduce", "In msg nelems": 256, "Out msg nelems": 256}
            t.kernel(ALLREDUCE, base + 30, base + 50 + 3 * rank, stream=20, dtype="Float", **args)
        t.write(folder / f"rank-{rank}.json")
    return folder


@pytest.fixture(scope="module")
def ranks_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ranks(tmp_path_factory.mktemp("engine") / "run")


def test_pool_equals_in_process(ranks_dir: Path):
    one = analyze([ranks_dir], jobs=1)
    pool = analyze([ranks_dir], jobs=2)
    assert output.to_json(one) == output.to_json(pool)
    # headline: every step but the last (2 of 3), one all-reduce each, on 3 ranks
    assert len(one.ranks) == 3 and len(one.matched) == 6
    assert one.traces == {}  # the parent holds no kernel tables unless asked


def test_keep_traces_and_progress(ranks_dir: Path):
    seen: list[TaskDone] = []
    a = analyze([ranks_dir], keep_traces=True, progress=seen.append, jobs=2)
    assert [t.rank for t in a.traces["run"]] == [0, 1, 2]
    assert sorted(t.done for t in seen) == [1, 2, 3] and {t.total for t in seen} == {3}
    assert {(t.group, t.path.name, t.ranks) for t in seen} == {
        ("run", f"rank-{r}.json", (r,)) for r in range(3)
    }


def test_task_result_is_small(ranks_dir: Path):
    task = FileTask("run", ranks_dir / "rank-0.json", 0)
    small = analyze_file(task, AnalysisConfig())
    kept = analyze_file(task, AnalysisConfig(), keep_traces=True)
    assert small.error is None and small.ranks[0].trace is None
    assert len(small.ranks[0].comm) == 2  # only the headline window's comm rows
    assert len(pickle.dumps(small)) < len(pickle.dumps(kept))


def test_bad_file_is_one_error_and_the_others_report(tmp_path: Path):
    folder = write_ranks(tmp_path / "run", n=2)
    (folder / "rank-2.json").write_text('{"traceEvents": [')
    a = analyze([folder], jobs=2)
    assert sorted(a.ranks["rank"]) == [0, 1]
    assert len(a.failures) == 1 and "rank-2.json" in str(a.failures[0])


def test_unknown_engine_is_a_one_line_error(ranks_dir: Path):
    with pytest.raises(TracekitError, match="unknown engine"):
        analyze([ranks_dir], engine="spark")
    with pytest.raises(TracekitError, match="--engine dask"):
        analyze([ranks_dir], scheduler="tcp://127.0.0.1:8786")


def test_pool_from_a_plain_script_without_main_guard(tmp_path: Path, ranks_dir: Path):
    script = tmp_path / "plain.py"
    script.write_text(
        textwrap.dedent(
            f"""
            from tracekit.analysis import analyze
            from tracekit.output import to_json

            a = analyze([{str(ranks_dir)!r}], jobs=2)
            print(to_json(a))
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == json.loads(output.to_json(analyze([ranks_dir], jobs=1)))


def test_dask_local_cluster_equals_local(ranks_dir: Path):
    pytest.importorskip("distributed")
    seen: list[TaskDone] = []
    dask = analyze([ranks_dir], engine="dask", jobs=2, progress=seen.append)
    assert output.to_json(dask) == output.to_json(analyze([ranks_dir]))
    assert sorted(t.done for t in seen) == [1, 2, 3]


def test_dask_with_a_scheduler_address(ranks_dir: Path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        dask = analyze([ranks_dir], engine="dask", scheduler=cluster.scheduler_address)
    assert output.to_json(dask) == output.to_json(analyze([ranks_dir]))


def test_unreachable_scheduler_is_a_one_line_error(ranks_dir: Path, monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setattr(engine, "CONNECT_TIMEOUT_S", 2)
    with pytest.raises(TracekitError, match="cannot reach the Dask scheduler"):
        analyze([ranks_dir], engine="dask", scheduler="tcp://127.0.0.1:1")


def test_parent_memory_grows_well_under_a_megabyte_per_rank(tmp_path: Path):
    # what the parent keeps is the Analysis: measure how it grows from 2 to 8 ranks
    small = analyze([write_ranks(tmp_path / "two", n=2, steps=20)])
    large = analyze([write_ranks(tmp_path / "eight", n=8, steps=20)])
    per_rank = (len(pickle.dumps(large)) - len(pickle.dumps(small))) / 6
    assert 0 < per_rank < 64 * 1024


def test_analysis_and_reports_never_import_torch():
    code = (
        "import sys, tracekit.cli, tracekit.analysis, tracekit.engine, tracekit.summary, "
        "tracekit.report.sections, tracekit.export.perfetto; "
        "print(sorted(m for m in ('torch', 'nvtx') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def crash(task: int) -> int:
    """A task whose worker process dies (as one killed for memory would)."""
    if task == 1:
        os._exit(9)
    return task


def test_a_dead_worker_is_a_one_line_error():
    with pytest.raises(TracekitError, match="a worker process died"):
        engine.run([0, 1, 2], crash, jobs=2)
