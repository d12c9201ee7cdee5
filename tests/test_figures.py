"""Overlap figures on hand-built traces whose answers were worked out by hand."""

from pathlib import Path

import pandas as pd
import pytest

from tests.chrome_trace import TraceBuilder, gpu_trace, one
from tracekit.analysis import analyze
from tracekit.config import AnalysisConfig


@pytest.fixture
def gpu_result(tmp_path: Path):
    return analyze([gpu_trace().write(tmp_path / "rank-0.json")])


def test_headline_by_hand(gpu_result):
    r = one(gpu_result.ranks, rank=0)
    # window = launched before step 2 began: A,B,C,G,D,E,F and late K (launched at 99)
    assert r.compute_us == 30 + 3 + 10  # [10,40) + [55,58) + K [140,150)
    assert r.comm_us == 25  # [25,45) u [42,50): both NCCL naming styles are comm
    assert r.overlap_us == 15  # [25,40)
    assert r.overlap_pct == pytest.approx(100 * 15 / 25)
    assert r.exposed_comm_us == 10
    # busy: [10,60) (memcpy counts as busy, not compute) + [140,150); extent [10,150)
    assert r.busy_us == 60
    assert r.idle_us == 140 - 60


def test_steps_assign_kernels_by_launch(gpu_result):
    s1 = one(gpu_result.steps, step=1)
    s2 = one(gpu_result.steps, step=2)
    assert s1.step_us == 100
    assert s1.compute_us == 43  # K ran during step 2's time but was launched in step 1
    assert (s2.compute_us, s2.comm_us, s2.overlap_us) == (10, 15, 5)
    assert s2.overlap_pct == pytest.approx(100 / 3)


def test_kernel_table_kinds_and_streams(tmp_path):
    (trace,) = analyze([gpu_trace().write(tmp_path / "rank-0.json")], keep_traces=True).traces[
        tmp_path.name
    ]
    k = trace.kernels
    assert set(k.loc[k["kind"] == "comm", "stream"]) == {20, 21}
    assert set(k.loc[k["kind"] == "compute", "stream"]) == {7, 8}
    assert list(k.loc[k["kind"] == "memory", "stream"]) == [20]
    assert set(k.loc[k["kind"] == "comm", "collective"]) == {"allreduce"}
    assert k["start_ns"].dtype == "int64" and k["start_ns"].min() == 10_000


def phase_trace(t: TraceBuilder) -> TraceBuilder:
    """Host 'backward' [5,26) launches A (at 9), C (14) and D (24); Kineto's GPU annotation for
    it says [20,45); host 'forward' [60,70) launches nothing."""
    t.host_range("backward", 5, 26, **{"External id": 77})
    t.gpu_annotation("backward", 20, 45, **{"External id": 77})
    t.host_range("forward", 60, 70, **{"External id": 78})
    return t


def test_phase_projected_through_launch_correlation(tmp_path):
    path = phase_trace(gpu_trace()).write(tmp_path / "rank-0.json")
    p = one(analyze([path]).phases, phase="backward")
    # projection of A, C, D = [10, 45): compute [10,40), comm [25,45) (D, and E clipped)
    assert (p.phase_us, p.compute_us, p.comm_us, p.overlap_us) == (35, 30, 20, 15)
    assert p.idle_us == 0


def test_phase_from_kineto_annotation_clips_straddling_kernels(tmp_path):
    path = phase_trace(gpu_trace()).write(tmp_path / "rank-0.json")
    result = analyze([path], AnalysisConfig(gpu_phases="annotation"))
    p = one(result.phases, phase="backward")
    # [20,45): A and B straddle into it (compute [20,40)), D [25,45), E clipped to [42,45)
    assert (p.phase_us, p.compute_us, p.comm_us, p.overlap_us) == (25, 20, 20, 15)
    assert p.overlap_pct == 75


def test_explicit_steps_replace_hta_window(tmp_path):
    path = gpu_trace().write(tmp_path / "rank-0.json")
    r = one(analyze([path], AnalysisConfig(steps=frozenset({2}))).ranks, rank=0)
    assert (r.compute_us, r.comm_us, r.overlap_us) == (10, 15, 5)
    assert r.window == "steps 2"


def test_no_communication_gives_null_and_a_note(tmp_path):
    t = TraceBuilder().step(1, 0, 50).step(2, 50, 100).kernel("gemm", 10, 20)
    result = analyze([t.write(tmp_path / "rank-0.json")])
    r = one(result.ranks, rank=0)
    assert r.comm_us == 0 and pd.isna(r.overlap_pct)
    assert any("no communication" in n for n in result.notes)


def cpu_trace(rank: int) -> TraceBuilder:
    """gloo: main thread ops [10,30) mm, [30,50) AccumulateGrad holding c10d::allreduce_
    [35,40), [60,70) add; worker thread gloo:all_reduce [36,55) and [80,90); step 2 later."""
    t = TraceBuilder(rank=rank, backend="gloo")
    t.step(1, 0, 100).step(2, 100, 200)
    t.cpu_op("aten::mm", 10, 30)
    t.cpu_op("autograd::engine::evaluate_function: AccumulateGrad", 30, 50)
    t.cpu_op("c10d::allreduce_", 35, 40)
    t.cpu_op("aten::add", 60, 70)
    t.cpu_op("aten::mm", 120, 130)
    dims = {"Input Dims": [[512, 512]], "Input type": ["float"]}
    t.host_range("gloo:all_reduce", 36, 55, tid=9001, **dims)
    t.host_range("gloo:all_reduce", 80, 90, tid=9001, **dims)
    t.host_range("backward", 25, 52)
    return t


def test_cpu_gloo_trace_by_hand(tmp_path):
    result = analyze([cpu_trace(0).write(tmp_path / "rank-0.json")])
    r = one(result.ranks, rank=0)
    assert r.platform == "cpu"
    assert r.compute_us == 20 + 5 + 10 + 10  # the collective call [35,40) is carved out
    assert r.comm_us == 19 + 10
    assert r.overlap_us == 10  # [40,50)
    p = one(result.phases, phase="backward")  # host range [25,52) on CPU traces
    assert (p.compute_us, p.comm_us, p.overlap_us) == (20, 16, 10)
    c = one(result.collectives, collective="allreduce")
    assert (c["count"], c["bytes"]) == (2, 2 * 512 * 512 * 4)
