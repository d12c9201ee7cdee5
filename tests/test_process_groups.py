"""Process groups: matching by (group, order within the group), mismatches, per-group
figures, bus bandwidth from the group size. A 4-rank TP×DP run built by hand."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tracekit import output
from tracekit.analysis import analyze_traces
from tracekit.schema import (
    COMM,
    COMPUTE,
    CPU_DEVICE,
    KERNEL_COLUMNS,
    NO_STEP,
    RANGE_COLUMNS,
    RANGE_STEP,
    UNKNOWN,
    RankTrace,
    conform,
)

# TP groups {0,1} "tp0" and {2,3} "tp1"; DP groups {0,2} "dp0" and {1,3} "dp1".
# Ranks 0 and 1 run their TP all-reduce first, ranks 2 and 3 their DP all-reduce first, so
# keying by (step, type, order) pairs rank 0's TP all-reduce with rank 2's DP one.
# (rank, pg, start µs, end µs, bytes)
COLLECTIVES = [
    (0, "tp0", 100, 150, 1000),
    (0, "dp0", 200, 260, 4000),
    (1, "tp0", 110, 150, 1000),
    (1, "dp1", 200, 280, 4000),
    (2, "dp0", 120, 260, 4000),
    (2, "tp1", 300, 330, 1000),
    (3, "dp1", 100, 280, 4000),
    (3, "tp1", 310, 330, 1000),
]
COMPUTE_ON_RANK0 = (120, 140)  # hides 20 µs of rank 0's TP all-reduce


def _kernel(rank: int, name: str, kind: str, start: int, end: int, **comm) -> dict:
    return {
        "rank": rank,
        "device": rank,
        "stream": 7 if kind == COMM else 3,
        "name": name,
        "kind": kind,
        "start_ns": start * 1000,
        "end_ns": end * 1000,
        "launch_ns": start * 1000 - 1000,
        "step": 1,
        "correlation": UNKNOWN,
        "collective": comm.get("collective", ""),
        "bytes": comm.get("bytes", UNKNOWN),
        "dtype": comm.get("dtype", ""),
        "pg": comm.get("pg", ""),
        "pg_size": comm.get("pg_size", UNKNOWN),
    }


def tp_dp_traces(with_groups: bool = True, sizes: dict | None = None) -> list[RankTrace]:
    """The four ranks; ``sizes`` overrides bytes per (rank, pg)."""
    traces = []
    for rank in range(4):
        rows = [
            _kernel(
                r, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", COMM, start, end,
                collective="allreduce",
                bytes=(sizes or {}).get((r, pg), size),
                dtype="Float",
                pg=pg if with_groups else "",
                pg_size=2 if with_groups else UNKNOWN,
            )
            for r, pg, start, end, size in COLLECTIVES
            if r == rank
        ]  # fmt: skip
        if rank == 0:
            rows.append(_kernel(0, "sgemm", COMPUTE, *COMPUTE_ON_RANK0))
        ranges = pd.DataFrame(
            [(rank, RANGE_STEP, "ProfilerStep#1", 1, CPU_DEVICE, 0, 400_000)],
            columns=list(RANGE_COLUMNS),
        )
        traces.append(
            RankTrace(
                rank=rank,
                source=Path(f"rank{rank}.json"),
                kernels=conform(pd.DataFrame(rows), KERNEL_COLUMNS),
                ranges=conform(ranges, RANGE_COLUMNS),
                platform="gpu",
                world_size=4,
            )
        )
    return traces


def _by(frame: pd.DataFrame, *keys: str) -> dict:
    return {
        tuple(k): row
        for k, row in zip(frame[list(keys)].values.tolist(), frame.to_dict("records"), strict=True)
    }


def test_per_type_keying_would_mis_pair_these_collectives():
    # the fallback key pairs rank 0's TP all-reduce (50 µs) with rank 2's DP one (140 µs)
    a = analyze_traces({"run": tp_dp_traces(with_groups=False)})
    m = a.matched
    first = m[m["seq"] == 0].set_index("rank")["dur_us"].to_dict()
    assert first == {0: 50.0, 1: 40.0, 2: 140.0, 3: 180.0}
    assert any("no process-group information" in n for n in a.notes)


def test_collectives_pair_by_group_and_order_within_it():
    a = analyze_traces({"run": tp_dp_traces()})
    m = _by(a.matched, "pg", "rank")
    # worked out by hand from COLLECTIVES: (pg, rank) -> dur, transfer, wait, start/end skew
    expected = {
        ("tp0", 0): (50, 40, 10, 0, 0),
        ("tp0", 1): (40, 40, 0, 10, 0),
        ("dp0", 0): (60, 60, 0, 80, 0),
        ("dp0", 2): (140, 60, 80, 0, 0),
        ("dp1", 1): (80, 80, 0, 100, 0),
        ("dp1", 3): (180, 80, 100, 0, 0),
        ("tp1", 2): (30, 20, 10, 0, 0),
        ("tp1", 3): (20, 20, 0, 10, 0),
    }
    assert set(m) == set(expected)
    for key, (dur, transfer, wait, start_skew, end_skew) in expected.items():
        row = m[key]
        got = (row["dur_us"], row["transfer_us"], row["wait_us"])
        assert got == (dur, transfer, wait), key
        assert (row["start_skew_us"], row["end_skew_us"]) == (start_skew, end_skew), key
        assert row["seq"] == 0 and row["step"] == 1
    # waits per rank: 0: 10, 1: 0, 2: 90, 3: 100 -> rank 1 is the one the others waited for
    s = a.stragglers.iloc[0]
    assert (s["slowest_rank"], s["slowest_wait_us"], s["max_wait_us"]) == (1, 0.0, 100.0)
    assert s["collectives"] == 4
    assert not any("no process-group information" in n for n in a.notes)
    assert a.mismatches.empty


def test_size_mismatch_is_reported_never_paired():
    a = analyze_traces({"run": tp_dp_traces(sizes={(1, "tp0"): 2000})})
    assert "tp0" not in set(a.matched["pg"])
    assert set(a.matched["pg"]) == {"dp0", "dp1", "tp1"}
    bad = a.mismatches.iloc[0]
    assert (bad["pg"], bad["seq"], bad["ranks"]) == ("tp0", 0, "0,1")
    assert "size differs" in bad["problem"]
    assert any("not matched across ranks" in n and "tp0" in n for n in a.notes)


def test_more_ranks_than_the_group_holds_is_a_mismatch():
    # the same group name on both TP groups (a description, not a unique name)
    traces = tp_dp_traces()
    for t in traces:
        t.kernels["pg"] = t.kernels["pg"].replace({"tp1": "tp0"})
    a = analyze_traces({"run": traces})
    assert "tp0" not in set(a.matched["pg"])
    assert a.mismatches.set_index("pg").loc["tp0", "ranks"] == "0,1,2,3"


def test_comm_overlap_and_exposed_per_process_group():
    a = analyze_traces({"run": tp_dp_traces()})
    pg = _by(a.process_groups, "rank", "pg")
    assert set(pg) == {(0, "tp0"), (0, "dp0"), (1, "tp0"), (1, "dp1"),
                       (2, "dp0"), (2, "tp1"), (3, "dp1"), (3, "tp1")}  # fmt: skip
    tp0 = pg[0, "tp0"]
    assert (tp0["comm_us"], tp0["overlap_us"], tp0["exposed_comm_us"]) == (50, 20, 30)
    assert tp0["overlap_pct"] == pytest.approx(40.0)
    assert (tp0["pg_size"], tp0["collectives"], tp0["bytes"]) == (2, 1, 1000)
    dp0 = pg[0, "dp0"]
    assert (dp0["comm_us"], dp0["overlap_us"], dp0["exposed_comm_us"]) == (60, 0, 60)
    # in every output format
    doc = output.to_dict(a)
    assert len(doc["process_groups"]) == 8
    assert "process_group" in output.to_csv(a)
    assert "Per process group" in output.to_table(a)


def test_bus_bandwidth_uses_the_group_size():
    a = analyze_traces({"run": tp_dp_traces()})
    row = a.collectives[a.collectives["rank"] == 0].iloc[0]
    # 5000 B in 110 µs; all-reduce over 2 ranks: factor 2(n-1)/n = 1 (world size 4 gives 1.5)
    assert row["algbw_gbps"] == pytest.approx(5000 / 110_000)
    assert row["busbw_gbps"] == pytest.approx(5000 / 110_000)
    plain = analyze_traces({"run": tp_dp_traces(with_groups=False)}).collectives.iloc[0]
    assert plain["busbw_gbps"] == pytest.approx(1.5 * 5000 / 110_000)


def test_no_group_information_adds_no_group_rows():
    a = analyze_traces({"run": tp_dp_traces(with_groups=False)})
    assert a.process_groups.empty
    assert "process_group" not in output.to_csv(a)


def test_collectives_outside_every_step_without_groups_match_nothing():
    traces = tp_dp_traces(with_groups=False)
    for t in traces:
        t.kernels["step"] = NO_STEP
    a = analyze_traces({"run": traces})
    assert a.matched.empty and a.stragglers.empty
