"""What-if predictions on hand-built traces and steps whose schedules are worked out by hand.

Times in the builder are µs; the model works in ns.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.chrome_trace import TraceBuilder
from tests.conftest import ROOT
from tracekit.contract import plan_buckets
from tracekit.errors import TracekitError
from tracekit.whatif import render
from tracekit.whatif.costmodel import fit
from tracekit.whatif.extract import StepInputs, extract
from tracekit.whatif.predict import predict_path
from tracekit.whatif.schedule import Costs, Variant, replay

GLOO_TID = 9001


def _step(**kw) -> StepInputs:
    """pre 10, gradients ready 10 and 20 into a 30-long backward, post 5; sizes 100, 300 B."""
    base = dict(
        step=1,
        measured_ns=0.0,
        pre_ns=10.0,
        pre_overlap_ns=0.0,
        ready_ns=np.array([10.0, 20.0]),
        ready_overlap_ns=np.zeros(2),
        sizes=np.array([100.0, 300.0]),
        backward_ns=30.0,
        backward_overlap_ns=0.0,
        post_ns=5.0,
        post_overlap_ns=0.0,
        sync_ns=0.0,
        sync_host_ns=0.0,
        sync_waited=0,
        sync_bytes=0.0,
        launched_in_backward=0,
    )
    return StepInputs(**(base | kw))


def _costs(contention: float = 1.0, wait_ns: float = 0.0) -> Costs:
    """All-reduce = 2 + 0.01 ns/B: 3 for 100 B, 5 for 300 B, 6 for both together."""
    comm = fit("allreduce", np.array([100, 300]), np.array([3.0, 5.0]))
    return Costs(comm=comm, copy_ns_per_byte=0.0, launch_ns=0.0, wait_ns=wait_ns,
                 contention=contention)  # fmt: skip


def test_cost_fit_recovers_a_line_and_says_when_sizes_are_too_few():
    sizes = np.array([1e3, 1e4, 1e5, 1e6] * 3)
    exact = fit("allreduce", sizes, 50_000 + 2.0 * sizes, np.repeat([1, 2, 3], 4))
    assert exact.latency_ns == pytest.approx(50_000)
    assert exact.ns_per_byte == pytest.approx(2.0)
    assert exact.median_error_pct == pytest.approx(0, abs=1e-9) and exact.note == ""
    assert exact.crossover_bytes == pytest.approx(25_000)
    assert exact.step_error_pct == pytest.approx(0, abs=1e-9)
    # Per step, errors of single collectives cancel: +10% and -10% of equal durations add to 0.
    noisy = fit("allreduce", np.array([1e3, 1e6, 1e3, 1e6]), np.array([1.1, 2.0, 0.9, 2.0]) * 1e6,
                np.array([1, 1, 2, 2]))  # fmt: skip
    assert noisy.median_error_pct > 0 and noisy.step_error_pct < noisy.median_error_pct
    one = fit("allreduce", np.array([1e6, 1e6]), np.array([3e6, 3e6]))
    assert one.latency_ns == 0 and one.ns_per_byte == pytest.approx(3.0)
    assert "only one message size" in one.note
    assert fit("allreduce", np.array([-1]), np.array([5.0])) is None


def test_naive_and_flat_communicate_after_backward():
    naive = replay(_step(), Variant("naive"), _costs())
    assert naive.step_ns == pytest.approx(10 + 30 + 5 + 3 + 5)
    assert (naive.comm_ns, naive.overlap_ns, naive.collectives) == (8, 0, 2)
    flat = replay(_step(), Variant("flat"), _costs())
    assert flat.step_ns == pytest.approx(10 + 30 + 6 + 5)
    assert flat.collectives == 1 and flat.exposed_ns == pytest.approx(6)
    # A blocking wait costs its host time once per wait.
    assert replay(_step(), Variant("naive"), _costs(wait_ns=1)).step_ns == pytest.approx(55)


def test_overlap_launches_at_ready_time_and_hides_behind_backward():
    r = replay(_step(), Variant("overlap"), _costs())
    # comm 20-23 and 30-35 inside backward (10-40); then post: 45.
    assert r.step_ns == pytest.approx(45)
    assert r.comm_ns == pytest.approx(8) and r.overlap_ns == pytest.approx(8)
    assert r.overlap_pct == pytest.approx(100)


def test_bucketed_waits_for_its_last_gradient():
    one = replay(_step(), Variant("bucketed", 1000), _costs())
    assert one.collectives == 1 and one.step_ns == pytest.approx(45)  # comm 30-36
    assert one.comm_ns == pytest.approx(6)
    small = replay(_step(), Variant("bucketed", 200), _costs())
    assert small.collectives == 2 and small.step_ns == pytest.approx(45)
    assert plan_buckets(np.array([100, 300, 50, 50]), 350) == [[0], [1, 2], [3]]


def test_contention_slows_both_lanes_while_they_overlap():
    r = replay(_step(), Variant("overlap"), _costs(contention=2.0))
    # comm0 (3) runs 20-26 at half speed beside compute; compute reaches gradient 1 at 33;
    # comm1 (5) runs 33-43 at half speed; backward's last 5 units end at 48; post: 53.
    assert r.step_ns == pytest.approx(53)
    assert r.comm_ns == pytest.approx(16) and r.overlap_ns == pytest.approx(16)


# --- a hand-built naive CPU trace -----------------------------------------------------------


def _dims(shape: list[int]) -> dict:
    return {"Input Dims": [shape], "Input type": ["float"]}


def naive_cpu_rank(rank: int = 0, steps: int = 3) -> TraceBuilder:
    """Two gradients: 400 B ready 15 µs and 1200 B ready 25 µs into a 30 µs backward; naive
    sync: 1200 B all-reduce 10 µs, 400 B 6 µs, each with a 1 µs call and a div_."""
    b = TraceBuilder(rank=rank, backend="gloo")
    for i in range(1, steps + 1):
        s = 1000.0 * i
        b.host_range("forward", s, s + 20)
        b.cpu_op("aten::mm", s + 1, s + 19)
        b.host_range("backward", s + 20, s + 50)
        b.cpu_op("aten::mm", s + 21, s + 34)
        b.cpu_op("torch::autograd::AccumulateGrad", s + 34, s + 35, **_dims([10, 10]))
        b.cpu_op("aten::mm", s + 35, s + 44)
        b.cpu_op("torch::autograd::AccumulateGrad", s + 44, s + 45, **_dims([30, 10]))
        b.cpu_op("aten::sum", s + 45, s + 50)
        b.host_range("allreduce", s + 50, s + 80)
        t = s + 50
        for shape, comm in (([30, 10], 10), ([10, 10], 6)):
            b.cpu_op("c10d::allreduce_", t, t + 1, **{"Input Dims": [[shape]]})
            b.host_range("gloo:all_reduce", t + 1, t + 1 + comm, tid=GLOO_TID, **_dims(shape))
            div = 1.5 if shape[0] == 30 else 0.5
            b.cpu_op("aten::div_", t + 1 + comm + 5, t + 1 + comm + 5 + div, **_dims(shape))
            t += 1 + comm + 5 + div
        assert t == s + 80
        b.host_range("optimizer", s + 80, s + 100)
        b.cpu_op("aten::add_", s + 81, s + 99)
        b.step(i, s, s + 100)
    return b


@pytest.fixture
def naive_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "naive").mkdir(parents=True)
    for r in range(2):
        naive_cpu_rank(r).write(run / "naive" / f"rank-{r}.trace.json.gz")
    return run


def test_extract_reads_ready_times_sizes_and_phases(naive_run: Path):
    data = extract(naive_run / "naive" / "rank-0.trace.json.gz")
    assert data.platform == "cpu" and data.variant == "naive"
    assert len(data.steps) == 2  # the last step is left out, as in every headline
    s = data.steps[0]
    assert s.measured_ns == 100_000 and s.pre_ns == 20_000 and s.backward_ns == 30_000
    assert list(s.ready_ns) == [15_000, 25_000]
    assert list(s.sizes) == [400, 1200]
    assert (s.sync_ns, s.post_ns, s.sync_waited) == (30_000, 20_000, 2)
    assert s.sync_host_ns == 30_000 - 16_000 and s.sync_bytes == 1600
    assert data.launch_ns == 1000
    assert data.copy_ns_per_byte == pytest.approx(2000 / 1600)


def test_prediction_from_a_naive_trace_worked_by_hand(naive_run: Path):
    w = predict_path(naive_run, contention=1.0, measured=False)
    assert w.cost.latency_ns == pytest.approx(4000) and w.cost.ns_per_byte == pytest.approx(5)
    assert "two message sizes" in w.cost.note
    # wait = (sync host 14 - copies 2 - calls 2) / 2 waits = 5 µs
    assert w.costs.wait_ns == pytest.approx(5000)
    by = {p.variant: p for p in w.predictions}
    assert by["naive"].step_us == pytest.approx(100)  # the measured step, replayed
    # overlap: grad 0 ready at 35, call 35-36, comm 36-42; grad 1 at 46, call 46-47, comm
    # 47-57; backward ends 52; div 0.5; blocked until 57 + 5 wake-up; div 1.5; post 20.
    assert by["overlap"].step_us == pytest.approx(83.5)
    assert by["overlap"].comm_us == pytest.approx(16)
    assert by["overlap"].exposed_comm_us == pytest.approx(4.5)
    assert by["overlap"].speedup == pytest.approx(100 / 83.5)
    # flat: flatten 2, call 1, comm 4 + 8 = 12, wait 5, average + unflatten 4: 100 - 26 + 24.
    assert by["flat"].step_us == pytest.approx(20 + 30 + 2 + 1 + 12 + 5 + 4 + 20)
    assert w.recommendation.endswith("MB") and "fastest predicted" in w.reason
    assert [p.variant for p in w.predictions][-4:] == [
        "bucketed 1 MB", "bucketed 5 MB", "bucketed 25 MB", "bucketed 100 MB"
    ]  # fmt: skip


def test_renderings_agree(naive_run: Path):
    w = predict_path(naive_run, contention=1.0, measured=False)
    doc = json.loads(render.to_json(w))
    assert doc["measured_variant"] == "naive" and doc["contention"]["factor"] == 1.0
    assert [v["variant"] for v in doc["variants"]] == [p.variant for p in w.predictions]
    assert doc["variants"][0]["steps"][0]["step_us"] == pytest.approx(100)
    csv = render.to_csv(w).splitlines()
    assert csv[0].startswith("variant,bucket_mb,step_us") and len(csv) == 1 + len(w.predictions)
    table = render.to_table(w)
    assert "recommended bucket size" in table and "overlap" in table


def test_a_trace_without_gradients_is_one_clear_error(tmp_path: Path):
    b = TraceBuilder(backend="gloo")
    b.cpu_op("aten::mm", 1, 5).step(1, 0, 10)
    path = b.write(tmp_path / "rank-0.trace.json")
    with pytest.raises(TracekitError, match="AccumulateGrad"):
        extract(path)


def test_cli_whatif(naive_run: Path, tmp_path: Path):
    exe = str(ROOT / ".venv/bin/tracekit")
    proc = subprocess.run([exe, "whatif", str(naive_run), "--format", "json", "--contention",
                           "1"], capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {v["variant"] for v in doc["variants"]} >= {"naive", "flat", "overlap"}
    bad = subprocess.run([exe, "whatif", str(tmp_path / "missing")], capture_output=True,
                         text=True)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "missing" in bad.stderr


def test_report_section_beside_the_measured_variants(naive_run: Path, tmp_path: Path):
    from tracekit.whatif.section import report_section

    assert report_section([str(naive_run / "naive")]) is None  # not a run directory
    assert report_section([str(naive_run), str(naive_run)]) is None
    s = report_section([str(naive_run)], {"naive": 0.1})
    assert s is not None and s.table.rows[0][:4] == ("naive", "0.1", "0.1", "+0.0")
    assert "all-reduce" in s.model and s.recommendation.endswith("MB")
    out = tmp_path / "report.html"
    proc = subprocess.run([str(ROOT / ".venv/bin/tracekit"), "report", str(naive_run), "-o",
                           str(out)], capture_output=True, text=True)  # fmt: skip
    assert out.is_file(), proc.stderr
    html = out.read_text()
    assert 'id="whatif"' in html and "Recommended bucket size" in html


def test_contention_factor_from_a_naive_and_an_overlap_trace(naive_run: Path):
    from dataclasses import replace

    from tracekit.whatif.predict import contention_factor

    naive = extract(naive_run / "naive" / "rank-0.trace.json.gz")  # backward 30 µs, 2 calls

    def overlap(pre_us: float) -> object:
        steps = tuple(
            replace(s, pre_ns=pre_us * 1e3, backward_ns=40e3, backward_overlap_ns=20e3)
            for s in naive.steps
        )
        return replace(naive, variant="overlap", steps=steps)

    # 10 µs longer, 2 µs of it the two hook calls: 8 of 20 overlapped µs lost -> f = 1 / 0.6
    assert contention_factor(naive, overlap(20)) == pytest.approx(1 / 0.6)
    # The same backward while forward took twice as long: a busier machine, not contention.
    assert contention_factor(naive, overlap(40)) == pytest.approx(1.0)


def test_gpu_ready_time_is_the_end_of_the_kernel_accumulate_grad_launched(tmp_path: Path):
    nccl = "ncclKernel_AllReduce_RING_LL_Sum_float"
    b = TraceBuilder()
    for i in range(1, 4):
        s = 1000.0 * i
        b.kernel("gemm", s + 10, s + 40, launch=s + 5)
        b.kernel("gemm_bwd", s + 50, s + 80, launch=s + 45)
        b.cpu_op("torch::autograd::AccumulateGrad", s + 46, s + 48, **_dims([10, 10]))
        b.kernel("add", s + 80, s + 85, launch=s + 47)  # launched by the first AccumulateGrad
        b.kernel("gemm_bwd2", s + 90, s + 120, launch=s + 60)
        b.cpu_op("torch::autograd::AccumulateGrad", s + 61, s + 62, **_dims([30, 10]))  # none
        for start, end, n in ((125, 135, 300), (136, 150, 100)):
            b.kernel(nccl, s + start, s + end, stream=20, launch=s + 63, **{
                "Collective name": "allreduce", "In msg nelems": n, "Out msg nelems": n,
                "dtype": "Float"})  # fmt: skip
        b.kernel("adam", s + 155, s + 190, launch=s + 64)
        b.step(i, s, s + 200)
    data = extract(b.write(tmp_path / "rank-0.trace.json.gz"))
    assert data.platform == "gpu" and data.variant == "naive"
    first = data.steps[0]
    assert first.measured_ns == 180_000  # GPU span: first kernel start to last kernel end
    assert first.pre_ns == 75_000  # no backward phase: backward starts at the first gradient
    assert list(first.ready_ns) == [0, 35_000]  # ends of "add" (85) and "gemm_bwd2" (120)
    assert list(first.sizes) == [400, 1200]
    assert sorted(data.collectives["bytes"]) == [400, 400, 1200, 1200]


def test_predictions_from_the_shared_ddp_gpu_trace(shared_chrome: Path):
    """nccl_allreduce: DDP on GPUs (5 bucket all-reduces per step, no recorded shapes)."""
    w = predict_path(shared_chrome / "nccl_allreduce" / "rank-0.json.gz")
    assert w.platform == "gpu" and w.measured_variant == "bucketed" and w.contention == 1.0
    by = {p.variant: p for p in w.predictions}
    assert by["flat"].collectives == 1 and by["overlap"].collectives == by["naive"].collectives
    assert by["overlap"].step_us <= by["naive"].step_us  # same collectives, some hidden
    assert any("record_shapes off" in n for n in w.notes)
