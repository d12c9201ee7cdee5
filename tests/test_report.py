"""Report numbers, figures and HTML (pure), and the report command end to end."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from tests.runs import (
    ADAM,
    EVIL,
    MANIFEST,
    write_cpu_run,
    write_run,
)
from tracekit import summary
from tracekit.analysis import analyze
from tracekit.cli import main
from tracekit.report import figures, html, sections
from tracekit.report.manifest import read_records
from tracekit.report.style import durations, esc
from tracekit.report.timeline import build_timeline, view

# Step lengths of gpu_rank (µs): naive 870 per step, overlap 680, each rank.
NAIVE_STEP_MS, OVERLAP_STEP_MS = 0.870, 0.680


@pytest.fixture(scope="module")
def analysis(run_dir: Path):
    return analyze([run_dir], keep_traces=True)


def test_variant_summary_by_hand(analysis):
    s = summary.variant_summary(analysis).set_index("group")
    assert s.loc["naive", "steps"] == 3  # headline: every step but the last
    assert s.loc["naive", "step_ms"] == pytest.approx(NAIVE_STEP_MS)
    assert s.loc["overlap", "step_ms"] == pytest.approx(OVERLAP_STEP_MS)
    assert s.loc["overlap", "speedup"] == pytest.approx(NAIVE_STEP_MS / OVERLAP_STEP_MS)
    assert s.loc["naive", "speedup"] == pytest.approx(1.0)
    assert s.loc["naive", "overlap_pct"] == 0
    # naive: one 185 µs all-reduce per step, nothing hides it
    assert s.loc["naive", "comm_ms"] == pytest.approx(0.185)
    assert s.loc["naive", "exposed_comm_ms"] == pytest.approx(0.185)
    assert s.loc["naive", "comm_share_pct"] == pytest.approx(100 * 0.185 / NAIVE_STEP_MS)


def test_no_speedup_without_a_naive_variant(tmp_path: Path):
    a = analyze([write_run(tmp_path / "run", variants=("overlap",))])
    assert summary.variant_summary(a)["speedup"].isna().all()


def test_breakdown_parts_add_up_to_the_span(analysis):
    parts = summary.breakdown(analysis)
    steps = summary.step_rows(analysis)
    span = steps.groupby(["group", "step"])["span_us"].mean() / 1e3
    per_step = parts[parts["label"] != summary.MEAN].set_index(["group", "step"])
    total = per_step[list(summary.BREAKDOWN_PARTS)].sum(axis=1)
    pd.testing.assert_series_equal(total, span.loc[total.index], check_names=False)
    means = parts[parts["label"] == summary.MEAN]
    assert means["group"].tolist() == ["naive", "overlap"]
    assert parts["label"].tolist()[:4] == ["step 1", "step 2", "step 3", "mean"]


def test_representative_step_is_the_median_step(analysis):
    assert summary.representative_step(analysis, "naive") == 2


def test_phase_summary_is_per_step(analysis):
    p = summary.phase_summary(analysis)
    fwd = p[(p["group"] == "naive") & (p["phase"] == "forward")]
    # forward's projected range: first kernel start to last end, 10 + 195 µs on step 2 rank 0
    assert fwd["phase_ms"].between(0.19, 0.21).all()


def test_top_kernels_by_total_time(analysis):
    top = summary.top_kernels(analysis, "naive")
    # per step and rank: 20 x 15 µs elementwise, 185 µs all-reduce, 10 x 15 µs gemm, 2 x 20 µs
    # adam; 3 headline steps, 2 ranks
    assert top["name"].tolist()[:4] == [
        "elementwise_kernel",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
        "volta_sgemm_128x64_nn",
        ADAM,
    ]
    assert top["count"].tolist()[:4] == [120, 6, 60, 12]
    assert top["total_ms"].tolist()[:4] == pytest.approx([1.8, 1.11, 0.9, 0.24])


def test_summary_functions_do_not_change_the_analysis(analysis):
    before = analysis.steps.copy(), analysis.phases.copy()
    summary.variant_summary(analysis)
    summary.breakdown(analysis)
    summary.phase_summary(analysis)
    pd.testing.assert_frame_equal(analysis.steps, before[0])
    pd.testing.assert_frame_equal(analysis.phases, before[1])


def test_timeline_figure_draws_the_view_with_escaped_hover(analysis):
    tl = build_timeline(analysis.traces["naive"])
    fig = figures.timeline_figure(tl)
    blocks = view(tl, 0, tl.span_ns, width_px=figures.PLOT_WIDTH_PX, budget=figures.BLOCK_BUDGET)
    bars = {t.meta: t for t in fig.data}
    assert set(bars) >= {"tracekit:step", "tracekit:phase", "tracekit:compute", "tracekit:comm"}
    assert sum(len(t.base) for t in fig.data) == len(blocks)
    hover = "".join(h for t in fig.data for h in t.hovertext)
    assert EVIL not in hover
    assert fig.layout.barmode == "overlay"
    assert list(fig.layout.yaxis.ticktext)[:2] == ["rank 0 · step", "rank 0 · phase"]
    menu = fig.layout.updatemenus[0]
    assert [b.label for b in menu.buttons] == ["all steps", "step 1", "step 2", "step 3", "step 4"]


def test_timeline_figure_hover_names_a_single_kernel(tmp_path: Path):
    a = analyze([write_run(tmp_path / "r", variants=("naive",), steps=2)], keep_traces=True)
    tl = build_timeline(a.traces["naive"])
    evil = tl.names.index(EVIL)
    at = tl.segments[tl.segments["name"] == evil]
    lo = int(at["start_ns"].iloc[0])
    fig = figures.timeline_figure(tl, x_range_ms=((lo - 1000) / 1e6, (lo + 3000) / 1e6))
    compute = next(t for t in fig.data if t.meta == "tracekit:compute")
    text = [h for h in compute.hovertext if "script" in h]
    assert text == [
        "<b>&lt;script&gt;window.__x=1&lt;/script&gt;</b><br>2.00 µs · compute"
        "<br>rank 0 · gpu 0 stream 7<br>step 2 · phase forward<br>at "
        f"{lo / 1e6:.3f} ms"
    ]


def test_breakdown_figure_one_panel_per_variant(analysis):
    fig = figures.breakdown_figure(summary.breakdown(analysis), analysis.groups)
    assert len(fig.data) == 2 * len(summary.BREAKDOWN_PARTS)
    assert fig.layout.barmode == "stack"
    assert [a.text for a in fig.layout.annotations] == ["naive", "overlap"]
    assert sum(t.showlegend for t in fig.data) == len(summary.BREAKDOWN_PARTS)


def test_phase_figure_bars_per_variant_and_phase(analysis):
    fig = figures.phase_figure(summary.phase_summary(analysis), analysis.groups)
    labels = list(fig.data[0].y)
    assert labels[:4] == ["naive · forward", "naive · backward", "naive · allreduce",
                          "naive · optimizer"]  # fmt: skip


def test_durations_pick_units():
    assert durations(np.array([5, 2_500, 3_000_000, 4_000_000_000])).tolist() == [
        "5 ns",
        "2.50 µs",
        "3.000 ms",
        "4.000 s",
    ]
    assert esc("<b>&") == "&lt;b&gt;&amp;"


# --- HTML ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report_html(analysis, run_dir: Path) -> str:
    report = sections.build_report(analysis, read_records([run_dir]), inputs=[str(run_dir)])
    return html.render_report(report)


def test_report_embeds_plotly_once_and_every_figure(report_html: str):
    assert report_html.count("plotly.js v") == 1
    scripts = re.findall(r'<script type="application/json" id="([^"]+)">', report_html)
    assert scripts == [
        "tk-variants-data",
        "tk-breakdown-data",
        "tk-phases-data",
        "tk-step-0-data",
        "tk-step-0-lod",
        "tk-step-1-data",
        "tk-step-1-lod",
    ]
    for key in ("tk-breakdown", "tk-phases", "tk-step-0", "tk-step-1"):
        assert f'<div class="tk-figure" id="{key}"' in report_html


def test_trace_strings_never_reach_the_html_raw(report_html: str):
    assert EVIL not in report_html
    assert "<b>not bold</b>" not in report_html  # from the manifest
    assert "&lt;script&gt;window.__x=1&lt;/script&gt;" in report_html  # the kernel table
    assert "&lt;b&gt;not bold&lt;/b&gt;" in report_html
    # inside JSON blocks nothing can close the script element
    for block in re.findall(r'type="application/json"[^>]*>(.*?)</script>', report_html, re.S):
        assert "<" not in block and ">" not in block
        json.loads(block)


def test_report_shows_the_manifest_generically(report_html: str):
    assert MANIFEST["command"] in report_html
    assert "H100 &lt;80GB&gt;" in report_html
    # a list of objects becomes a table
    assert re.search(r"<th>path</th>\s*<th>bytes</th>", report_html)
    assert re.search(r"<td>\s*naive/rank-0.trace.json.gz\s*</td>\s*<td>\s*123\s*</td>", report_html)


def test_script_safe_escapes_what_could_end_a_script():
    text = html.script_safe('{"a": "</script><!-- & \u2028"}')
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(str(text)) == {"a": "</script><!-- & \u2028"}


def test_write_text_replaces_atomically(tmp_path: Path):
    out = tmp_path / "r.html"
    out.write_text("old")
    assert html.write_text(out, "new") == 3
    assert out.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_records_tolerate_a_broken_manifest(tmp_path: Path):
    run = write_run(tmp_path / "run", variants=("naive",), manifest=False)
    (run / "manifest.json").write_text("{broken")
    records = read_records([run])
    assert records.manifest is None
    assert "manifest.json: unreadable" in records.notes[0]


def test_cpu_report_builds(tmp_path: Path):
    a = analyze([write_cpu_run(tmp_path / "cpu")], keep_traces=True)
    report = sections.build_report(a)
    assert report.variants[0].timeline is not None
    assert "thread 9001" in html.render_report(report)


# --- CLI -----------------------------------------------------------------------------------


def test_report_cli_from_a_run_directory(run_dir: Path, tmp_path: Path):
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(run_dir), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.stderr
    text = out.read_text()
    assert "speedup vs naive" in text
    assert ">naive<" in text and ">overlap<" in text


def test_report_cli_from_trace_directories(run_dir: Path, tmp_path: Path):
    out = tmp_path / "report.html"
    args = ["report", str(run_dir / "overlap"), str(run_dir / "naive"), "-o", str(out), "-q"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert out.stat().st_size < 5_500_000


def test_report_cli_refuses_to_overwrite_without_force(run_dir: Path, tmp_path: Path):
    out = tmp_path / "report.html"
    out.write_text("keep")
    result = CliRunner().invoke(main, ["report", str(run_dir), "-o", str(out)])
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "already exists" in result.stderr
    assert out.read_text() == "keep"
    forced = CliRunner().invoke(main, ["report", str(run_dir), "-o", str(out), "--force"])
    assert forced.exit_code == 0
    assert out.read_text().startswith("<!doctype html>")


def test_report_cli_exits_1_without_communication(tmp_path: Path):
    from tests.chrome_trace import TraceBuilder

    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 100).step(2, 100, 200)
    b.kernel("gemm", 10, 90, launch=5).kernel("gemm", 110, 190, launch=105)
    d = tmp_path / "single"
    d.mkdir()
    b.write(d / "rank-0.json")
    result = CliRunner().invoke(main, ["report", str(d), "-o", str(tmp_path / "r.html"), "-q"])
    assert result.exit_code == 1
    assert "no communication" in result.stderr
    assert (tmp_path / "r.html").exists()


def test_records_read_the_variants_timing(tmp_path: Path):
    run = write_run(tmp_path / "run", variants=("naive",), steps=2)
    timing = {"variant": "naive", "flags": {"steps": 2}, "environment": {"torch": "x"}, "x": 1}
    (run / "naive" / "timing.json").write_text(json.dumps(timing))
    records = read_records([run])
    assert records.manifest == MANIFEST
    assert records.timings == {"naive": timing}
    report = sections.build_report(analyze([run], keep_traces=True), records)
    assert report.timings == {"naive": {k: timing[k] for k in ("variant", "flags", "environment")}}


@pytest.mark.parametrize(
    "setup",
    ["missing", "not-a-trace", "empty-dir", "no-dir-for-output"],
)
def test_report_cli_bad_input_is_one_line_and_exit_2(setup: str, tmp_path: Path):
    out = tmp_path / "report.html"
    path = tmp_path / "input"
    if setup == "not-a-trace":
        path.mkdir()
        (path / "rank-0.json").write_text("[1, 2]")
    elif setup == "empty-dir":
        path.mkdir()
    elif setup == "no-dir-for-output":
        write_run(path, variants=("naive",), steps=2)
        out = tmp_path / "nowhere" / "report.html"
    result = CliRunner().invoke(main, ["report", str(path), "-o", str(out)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracekit: error: ")
    assert "Traceback" not in result.output
    assert not out.exists()
