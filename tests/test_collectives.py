"""Collective sizes, bandwidth factors and cross-rank matching on hand-built traces."""

import pytest

from tests.chrome_trace import ALLREDUCE_NEW, TraceBuilder, one
from tracekit.analysis import analyze
from tracekit.collectives import bus_factor


def test_nccl_tests_bus_factors():
    assert bus_factor("allreduce", 4) == pytest.approx(1.5)
    assert bus_factor("allgather", 4) == pytest.approx(0.75)
    assert bus_factor("reducescatter", 8) == pytest.approx(7 / 8)
    assert bus_factor("broadcast", 8) == 1.0
    assert bus_factor("allreduce", 1) == 1.0


def test_bytes_from_kernel_args_and_from_record_param_comms(tmp_path):
    t = TraceBuilder(rank=0, world_size=4).step(1, 0, 100).step(2, 100, 200)
    args = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000}
    t.kernel(ALLREDUCE_NEW, 10, 20, stream=20, dtype="Float", **args)  # 4000 B in 10 µs
    # no args on the kernel: they come from the record_param_comms op around its launch
    t.cpu_op("record_param_comms", 40, 44, **(args | {"dtype": "BFloat16"}))
    t.kernel(ALLREDUCE_NEW, 50, 60, stream=20, launch=42)  # 2000 B in 10 µs
    c = one(analyze([t.write(tmp_path / "r.json")]).collectives, collective="allreduce")
    assert (c["count"], c["bytes"], c["total_us"], c["mean_us"]) == (2, 6000, 20, 10)
    assert c["algbw_gbps"] == pytest.approx(6000 / 20_000)  # bytes per ns = GB/s
    assert c["busbw_gbps"] == pytest.approx(6000 / 20_000 * 1.5)


def test_unknown_sizes_leave_bandwidth_null_with_a_note(tmp_path):
    t = TraceBuilder().step(1, 0, 100).step(2, 100, 200).kernel(ALLREDUCE_NEW, 10, 20)
    result = analyze([t.write(tmp_path / "r.json")])
    assert result.collectives["algbw_gbps"].isna().all()
    assert any("sizes unknown for 1 of 1" in n for n in result.notes)


def two_ranks(tmp_path, durations):
    for rank, durs in enumerate(durations):
        t = TraceBuilder(rank=rank).step(1, 0, 100).step(2, 100, 200)
        start = 10
        for d in durs:
            t.kernel(ALLREDUCE_NEW, start, start + d, stream=20)
            start += d + 5
        t.write(tmp_path / f"rank-{rank}.json")
    return analyze([tmp_path])


def test_matching_splits_transfer_from_wait_and_names_slowest_rank(tmp_path):
    result = two_ranks(tmp_path, [[10, 30], [25, 12]])
    m = result.matched
    assert list(m["transfer_us"]) == [10, 10, 12, 12]
    assert one(m, seq=0, rank=1)["wait_us"] == 15
    assert one(m, seq=1, rank=0)["wait_us"] == 18
    s = one(result.stragglers, step=1)
    # rank 0 waited 18 µs in total, rank 1 waited 15: the others waited for rank 1
    assert (s["slowest_rank"], s["slowest_wait_us"], s["max_wait_us"]) == (1, 15, 18)


def test_collectives_missing_on_a_rank_are_not_matched(tmp_path):
    result = two_ranks(tmp_path, [[10, 30], [25]])
    assert set(result.matched["seq"]) == {0}
