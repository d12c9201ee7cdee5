"""Checks that the synthetic run directories (tests/runs.py) hold what the report, timeline
and compare tests rely on (naive does not overlap; overlap does)."""

from __future__ import annotations

from pathlib import Path

from tests.runs import EVIL, write_cpu_run
from tracekit.analysis import analyze


def test_naive_does_not_overlap_and_overlap_does(run_dir: Path):
    a = analyze([run_dir], keep_traces=True)
    assert a.groups == ["naive", "overlap"]
    ranks = a.ranks.set_index(["group", "rank"])
    assert (ranks.loc["naive", "overlap_us"] == 0).all()
    # overlap: 100 + 110 µs of all-reduce, all of it under backward's kernels (20 of every 20)
    assert (ranks.loc["overlap", "overlap_pct"] > 70).all()
    assert EVIL in set(a.traces["naive"][0].kernels["name"])


def test_cpu_run_has_gloo_threads(tmp_path: Path):
    a = analyze([write_cpu_run(tmp_path / "cpu")], keep_traces=True)
    k = a.traces["cpu"][0].kernels
    assert a.traces["cpu"][0].platform == "cpu"
    assert set(k.loc[k["kind"] == "comm", "stream"]) == {9001, 9002}
