"""Timeline data: lanes, segments, overlap, phases, level of detail, packing; and the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from tests.chrome_trace import TraceBuilder
from tests.runs import (
    COMM_STREAM,
    COMPUTE_STREAM,
    EVIL,
    NCCL,
    write_cpu_run,
    write_variant,
)
from tracekit import intervals as iv
from tracekit.analysis import analyze, analyze_traces
from tracekit.cli import main
from tracekit.load import load
from tracekit.overlap import split
from tracekit.report.lod import payload, quantum_ns, smallest, unpack
from tracekit.report.style import BAR_WIDTH, MIN_BUSY_HEIGHT, bar_heights, hover_text
from tracekit.report.timeline import (
    NO_PHASE,
    build_timeline,
    covered,
    innermost,
    merge_runs,
    stack_levels,
    step_windows,
    view,
)


def _traces(path: Path, group: str | None = None):
    a = analyze([path], keep_traces=True)
    return a.traces[group or a.groups[0]]


def _tiny(tmp_path: Path) -> Path:
    """One rank: compute [0, 100) and [120, 200) µs, comm [50, 150) µs, one step, phases."""
    b = TraceBuilder(rank=0, world_size=2)
    b.step(1, 0, 210)
    b.host_range("forward", 0, 100)
    b.host_range("backward", 100, 205)
    b.kernel("gemm", 10, 100, stream=COMPUTE_STREAM, launch=1)
    b.kernel("gemm2", 120, 200, stream=COMPUTE_STREAM, launch=101)
    b.kernel(NCCL, 50, 150, stream=COMM_STREAM, launch=2)
    d = tmp_path / "tiny"
    d.mkdir()
    b.write(d / "rank-0.trace.json.gz")
    return d


def test_lanes_per_rank_steps_phases_streams_overlap(run_dir: Path):
    tl = build_timeline(_traces(run_dir / "overlap"))
    roles = [(lane.rank, lane.role, lane.stream) for lane in tl.lanes]
    for r in (0, 1):
        assert [x for x in roles if x[0] == r] == [
            (r, "step", -1),
            (r, "phase", -1),
            (r, "compute", COMPUTE_STREAM),
            (r, "comm", COMM_STREAM),
            (r, "overlap", -1),
            (r, "exposed", -1),
        ]
    assert tl.lanes[3].label == f"rank 0 · gpu 0 stream {COMM_STREAM} · comm"


def test_cpu_trace_lanes_are_threads(tmp_path: Path):
    tl = build_timeline(_traces(write_cpu_run(tmp_path / "cpu")))
    mine = [lane for lane in tl.lanes if lane.rank == 0]
    assert [(x.role, x.stream) for x in mine if x.role in ("compute", "comm")] == [
        ("compute", 4242),
        ("comm", 9001),
        ("comm", 9002),
    ]
    assert mine[3].label == "rank 0 · thread 9001 · comm"


def test_overlap_lane_is_comm_intersect_compute(tmp_path: Path):
    tl = build_timeline(_traces(_tiny(tmp_path)))
    seg = tl.segments
    overlap = seg[seg["series"] == "overlap"]
    origin = 0  # the first activity: the step range at 0 µs
    got = list(zip(overlap["start_ns"] + origin, overlap["end_ns"] + origin, strict=True))
    assert got == [(50_000, 100_000), (120_000, 150_000)]
    assert tl.names[overlap["name"].iloc[0]] == "comm ∥ compute"


def test_exposed_lane_is_comm_minus_compute_from_overlap_split(tmp_path: Path):
    traces = _traces(_tiny(tmp_path))
    tl = build_timeline(traces)
    seg = tl.segments
    exposed = seg[seg["series"] == "exposed"]
    # comm [50, 150) minus compute [10, 100) and [120, 200): [100, 120) µs
    assert list(zip(exposed["start_ns"], exposed["end_ns"], strict=True)) == [(100_000, 120_000)]
    assert tl.names[exposed["name"].iloc[0]] == "exposed comm"
    assert (exposed["step"] == 1).all()
    lanes = [lane for lane in tl.lanes if lane.role == "exposed"]
    assert [lane.label for lane in lanes] == ["rank 0 · exposed comm"]
    # the same intervals as the one overlap computation, shifted to the timeline's origin
    origin = int(traces[0].ranges["start_ns"].min())
    parts = split(traces[0].kernels)
    assert (exposed["start_ns"].to_numpy() + origin).tolist() == parts.exposed[0].tolist()
    overlap = seg[seg["series"] == "overlap"]
    assert (overlap["end_ns"].to_numpy() + origin).tolist() == parts.both[1].tolist()


def test_exposed_and_overlap_lanes_are_clipped_to_the_window(tmp_path: Path):
    traces = _traces(_tiny(tmp_path))
    at = int(traces[0].ranges["start_ns"].min())
    tl = build_timeline(traces, windows={0: (at + 60_000, at + 110_000)}, origins={0: at})
    seg = tl.segments
    got = {
        series: list(zip(f["start_ns"], f["end_ns"], strict=True))
        for series, f in seg[seg["series"].isin(["overlap", "exposed"])].groupby(
            seg["series"].astype(str)
        )
    }
    assert got == {"overlap": [(60_000, 100_000)], "exposed": [(100_000, 110_000)]}


def test_merged_busy_time_is_the_union_of_the_intervals():
    # one block of three intervals: [0, 10) and [5, 12) overlap (12 covered), [20, 22)
    block = np.zeros(3, dtype=np.int64)
    start = np.array([0, 5, 20])
    end = np.array([10, 12, 22])
    assert covered(block, start, end, np.array([0])).tolist() == [14]
    # two blocks; nested intervals count once; a block's first row counts whole
    block = np.array([0, 0, 1, 1])
    start, end = np.array([0, 2, 30, 31]), np.array([10, 4, 40, 35])
    assert covered(block, start, end, np.array([0, 2])).tolist() == [10, 10]


def test_bar_heights_are_the_busy_share_of_a_full_bar():
    blocks = pd.DataFrame(
        {"start_ns": [0, 0, 0, 0], "end_ns": [100, 100, 100, 0], "busy_ns": [100, 25, 1, 0]}
    )
    heights = bar_heights(blocks)
    assert heights.tolist() == pytest.approx(
        [BAR_WIDTH, BAR_WIDTH * 0.25, BAR_WIDTH * MIN_BUSY_HEIGHT, BAR_WIDTH]
    )


def test_mostly_idle_merged_block_is_drawn_low_and_says_how_busy(tmp_path: Path):
    """Kernels 10 µs long every 40 µs: zoomed out they merge into one block 25% busy."""
    b = TraceBuilder(rank=0)
    b.step(1, 0, 40_000)
    for i in range(1000):
        b.kernel("k", 40 * i, 40 * i + 10, launch=40 * i)
    loaded = load([b.write(tmp_path / "rank-0.json")])
    tl = build_timeline(analyze_traces(loaded.groups).traces[tmp_path.name])
    blocks = view(tl, width_px=500)
    compute = blocks[blocks["series"] == "compute"]
    assert len(compute) < 20 and compute["count"].sum() == 1000
    assert compute["busy_ns"].sum() == 1000 * 10_000
    share = compute["busy_ns"] / (compute["end_ns"] - compute["start_ns"])
    assert share.between(0.24, 0.26).all()
    heights = bar_heights(compute)
    assert heights == pytest.approx(BAR_WIDTH * share.to_numpy())
    text = hover_text(compute, tl).iloc[0]
    assert "busy " in text and " of " in text and "(25%)" in text


def test_kernel_hover_fields_step_and_innermost_phase(tmp_path: Path):
    tl = build_timeline(_traces(_tiny(tmp_path)))
    seg = tl.segments
    names = np.array(tl.names, dtype=object)
    k = seg[seg["series"].isin(["compute", "comm"])].assign(n=lambda f: names[f["name"]])
    by_name = k.set_index("n")
    assert (by_name["step"] == 1).all()
    assert names[by_name.loc["gemm", "phase"]] == "forward"
    assert names[by_name.loc["gemm2", "phase"]] == "backward"


def test_segments_are_relative_to_the_origin_and_clipped_to_windows(tmp_path: Path):
    traces = _traces(_tiny(tmp_path))
    raw_start = int(traces[0].ranges["start_ns"].min())
    window = (raw_start + 60_000, raw_start + 130_000)
    tl = build_timeline(traces, windows={0: window}, origins={0: window[0]})
    seg = tl.segments
    assert seg["start_ns"].min() == 0
    assert seg["end_ns"].max() == 70_000
    assert tl.span_ns == 70_000
    gemm = seg[(seg["series"] == "compute")]
    pairs = list(zip(gemm["start_ns"], gemm["end_ns"], strict=True))
    assert pairs == [(0, 40_000), (60_000, 70_000)]


def test_build_timeline_does_not_change_the_traces(run_dir: Path):
    traces = _traces(run_dir / "naive")
    before = [(t.kernels.copy(), t.ranges.copy()) for t in traces]
    build_timeline(traces)
    for t, (k, r) in zip(traces, before, strict=True):
        pd.testing.assert_frame_equal(t.kernels, k)
        pd.testing.assert_frame_equal(t.ranges, r)


def test_step_windows_cover_the_step_and_its_kernels(tmp_path: Path):
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.kernel("late", 90, 150, launch=50)  # launched in step 1, runs past its end
    b.step(2, 100, 200)
    b.kernel("k", 120, 130, launch=110)
    path = b.write(tmp_path / "rank-0.json")
    w = step_windows(analyze([path], keep_traces=True).traces[tmp_path.name][0])
    base = int(w["start_ns"].iloc[0])
    assert (w["end_ns"] - base).tolist() == [150_000, 200_000]
    assert w["step"].tolist() == [1, 2]


def test_stack_levels_nest_and_never_collide():
    start = np.array([0, 10, 20, 50, 60])
    end = np.array([100, 40, 30, 70, 65])
    assert stack_levels(start, end, 4).tolist() == [0, 1, 2, 1, 2]
    # partial overlaps: the third range fits under the first again
    assert stack_levels(np.array([0, 5, 12]), np.array([10, 20, 30]), 4).tolist() == [0, 1, 0]
    assert stack_levels(np.array([0, 1, 2]), np.array([9, 9, 9]), 2).tolist() == [0, 1, 1]


def test_innermost_phase():
    start = np.array([0, 10, 20, 50, 60])
    end = np.array([100, 40, 30, 70, 65])
    times = np.array([5, 15, 25, 45, 62, 80, 150])
    codes = np.array([0, 1, 2, 3, 4])
    assert innermost(times, start, end, codes).tolist() == [0, 1, 2, 0, 4, 0, -1]


def test_merge_runs_merges_tiny_neighbours_only():
    group = np.zeros(6, dtype=np.int64)
    start = np.array([0, 3, 6, 100, 300, 302])
    end = np.array([2, 5, 8, 200, 301, 304])
    # gap 2: three tiny kernels close together, one long one alone, then two tiny again
    assert merge_runs(group, start, end, 2).tolist() == [0, 3, 4]
    # a tiny kernel further than the gap starts a block of its own
    assert merge_runs(group, start, end, 0).tolist() == [0, 1, 2, 3, 4, 5]
    # groups never merge
    assert merge_runs(np.array([0, 1]), np.array([0, 1]), np.array([1, 2]), 5).tolist() == [0, 1]


def _dense_timeline(n: int, seed: int = 0):
    """A timeline of ``n`` compute kernels on one lane, 1-5 µs long, 0-3 µs apart."""
    b = TraceBuilder(rank=0)
    rng = np.random.default_rng(seed)
    t = 0.0
    for dur, gap in zip(rng.uniform(1, 5, n), rng.uniform(0, 3, n), strict=True):
        b.kernel("k", t, t + dur, launch=t)
        t += dur + gap
    b.step(1, -1, t + 1)
    return b


def test_view_respects_the_budget_and_shows_every_kernel_when_zoomed_in(tmp_path: Path):
    path = _dense_timeline(5000).write(tmp_path / "rank-0.json")
    tl = build_timeline(analyze([path], keep_traces=True).traces[tmp_path.name])
    kernels = tl.segments[tl.segments["series"] == "compute"]
    assert len(kernels) == 5000
    zoomed_out = view(tl, width_px=1000, budget=200)
    compute = zoomed_out[zoomed_out["series"] == "compute"]
    assert len(compute) <= 200
    assert compute["count"].sum() == 5000  # every kernel is in some block
    assert compute["busy_ns"].sum() == (kernels["end_ns"] - kernels["start_ns"]).sum()
    # 20 µs wide: each kernel is hundreds of pixels, so none merges
    lo = int(kernels["start_ns"].iloc[2000])
    zoomed_in = view(tl, lo, lo + 20_000, width_px=1000)
    shown = zoomed_in[zoomed_in["series"] == "compute"]
    assert (shown["count"] == 1).all()
    inside = kernels[(kernels["end_ns"] > lo - 10_000) & (kernels["start_ns"] < lo + 30_000)]
    assert len(shown) == len(inside)


def test_smallest_picks_the_smallest_type():
    cases = (([0, 255], "u1"), ([0, 70_000], "u4"), ([-1, 5], "i1"), ([-1, 300], "i2"))
    for values, dtype in cases:
        code, data = smallest(np.array(values))
        assert code == dtype
        assert np.frombuffer(data, f"<{dtype}").tolist() == values
    with pytest.raises(ValueError):
        smallest(np.array([0, 2**40]))


def test_payload_round_trips_every_interval(run_dir: Path):
    tl = build_timeline(_traces(run_dir / "naive"))
    p = payload(tl)
    assert p["quantum_ns"] == quantum_ns(tl.span_ns) == 1
    groups = unpack(p)
    seg = tl.segments
    assert [(g["lane"], g["series"]) for g in p["groups"]] == list(
        dict.fromkeys(zip(seg["lane"], seg["series"].astype(str), strict=True))
    )
    got = pd.DataFrame(
        {
            "start_ns": np.concatenate([g["start"] for g in groups]),
            "end_ns": np.concatenate([g["start"] + g["dur"] for g in groups]),
            "name": np.concatenate([g["name"] for g in groups]),
            "step": np.concatenate([g["step"] for g in groups]),
            "phase": np.concatenate([g["phase"] for g in groups]),
        }
    )
    want = seg[["start_ns", "end_ns", "name", "step", "phase"]].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want)
    assert "&lt;script&gt;" in "".join(p["names"])  # escaped for plotly's labels
    assert EVIL not in "".join(p["names"])
    assert quantum_ns(2**33) == 3


def test_no_phase_code_is_minus_one(tmp_path: Path):
    b = TraceBuilder(rank=0)
    b.step(1, 0, 50)
    b.kernel("k", 10, 20, launch=5)
    path = b.write(tmp_path / "rank-0.json")
    tl = build_timeline(analyze([path], keep_traces=True).traces[tmp_path.name])
    assert (tl.segments.loc[tl.segments["series"] == "compute", "phase"] == NO_PHASE).all()


def test_interval_helpers_agree_with_overlap(tmp_path: Path):
    traces = _traces(_tiny(tmp_path))
    k = traces[0].kernels
    comm = k[k["kind"] == "comm"]
    comp = k[k["kind"] == "compute"]
    both = iv.intersect(
        iv.union(comm["start_ns"], comm["end_ns"]), iv.union(comp["start_ns"], comp["end_ns"])
    )
    tl = build_timeline(traces)
    seg = tl.segments[tl.segments["series"] == "overlap"]
    assert (seg["end_ns"] - seg["start_ns"]).sum() == iv.length(both)


# --- CLI -----------------------------------------------------------------------------------


def test_timeline_cli_writes_one_self_contained_file(run_dir: Path, tmp_path: Path):
    out = tmp_path / "timeline.html"
    result = CliRunner().invoke(main, ["timeline", str(run_dir / "overlap"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.count("plotly.js v") >= 1 and text.count('id="tk-timeline-0-lod"') == 1
    assert "<script src=" not in text  # nothing fetched from elsewhere
    assert EVIL not in text
    assert [p.name for p in tmp_path.iterdir()] == ["timeline.html"]  # no temporary files left


def test_timeline_cli_refuses_to_overwrite_without_force(run_dir: Path, tmp_path: Path):
    out = tmp_path / "t.html"
    out.write_text("keep me")
    runner = CliRunner()
    result = runner.invoke(main, ["timeline", str(run_dir / "naive"), "-o", str(out)])
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0 and "--force" in result.stderr
    assert out.read_text() == "keep me"
    forced = runner.invoke(main, ["timeline", str(run_dir / "naive"), "-o", str(out), "--force"])
    assert forced.exit_code == 0 and out.read_text() != "keep me"


def test_timeline_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "rank-0.json").write_text('{"traceEvents": [')
    for paths in ([str(tmp_path / "missing")], [str(bad)]):
        result = CliRunner().invoke(main, ["timeline", *paths, "-o", str(tmp_path / "t.html")])
        assert result.exit_code == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tracekit: error:")
    assert not (tmp_path / "t.html").exists()


def test_timeline_cli_steps_limits_the_window(run_dir: Path, tmp_path: Path):
    out = tmp_path / "t.html"
    result = CliRunner().invoke(
        main, ["timeline", str(run_dir / "naive"), "-o", str(out), "--steps", "2", "-q"]
    )
    assert result.exit_code == 0, result.output
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("steps", "shown"), [(None, [1, 2, 3]), ("2", [2]), ("2-3", [2, 3]), ("99", [])]
)
def test_timeline_page_shows_the_headline_steps(run_dir: Path, steps, shown):
    """Every step but the last, as --steps says by default; the chosen ones with --steps."""
    from tracekit.config import AnalysisConfig
    from tracekit.report.sections import build_timeline_page
    from tracekit.selection import Selection

    config = AnalysisConfig(steps=Selection.parse(steps) if steps else None)
    loaded = load([run_dir / "naive"], config)
    page = build_timeline_page(analyze_traces(loaded.groups, config))
    fig = page.timelines[0].figure
    bars = next((t for t in fig.data if t.meta == "tracekit:step"), None)
    names = sorted({h.split("</b>")[0] for h in bars.hovertext}) if bars is not None else []
    assert names == [f"<b>ProfilerStep#{s}" for s in shown]


def test_timeline_cli_partial_input_exits_1(tmp_path: Path):
    d = write_variant(tmp_path / "v", "naive", ranks=1)
    (d / "rank-1.trace.json.gz").write_bytes(b"not gzip")
    result = CliRunner().invoke(main, ["timeline", str(d), "-o", str(tmp_path / "t.html")])
    assert result.exit_code == 1
    assert "rank-1.trace.json.gz" in result.stderr
    assert (tmp_path / "t.html").exists()
