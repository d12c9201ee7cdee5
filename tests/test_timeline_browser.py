"""The timeline in real headless Chromium: it draws, merges when zoomed out, shows every kernel
when zoomed in, jumps to a step, and hover text is text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.browser import bar_center, pixel_stats, written_page
from tests.chrome_trace import TraceBuilder
from tests.runs import COMM_STREAM, EVIL, NCCL

pytestmark = pytest.mark.browser

KERNELS_PER_STEP = 1500
STEPS = 3


def _dense_rank(rank: int) -> TraceBuilder:
    """Three steps of 1500 short kernels each (1-4 µs, 0-2 µs apart) and an all-reduce."""
    rng = np.random.default_rng(rank)
    b = TraceBuilder(rank=rank, world_size=2)
    t = 100.0
    for step in range(1, STEPS + 1):
        start = t
        b.host_range("forward", t, t + 10)
        b.host_range("backward", t + 10, t + 10_000)
        if rank == 0 and step == 2:
            b.kernel(EVIL, t + 1, t + 4, launch=t + 0.5)
            t += 5
        durations = rng.uniform(1, 4, KERNELS_PER_STEP)
        gaps = rng.uniform(0, 2, KERNELS_PER_STEP)
        for dur, gap in zip(durations, gaps, strict=True):
            b.kernel("gemm", t, t + dur, launch=t - 0.5)
            t += dur + gap
        b.kernel(NCCL, start + 500, start + 2500, stream=COMM_STREAM, launch=start + 400)
        b.step(step, start, t + 5)
        t += 50
    return b


@pytest.fixture(scope="module")
def timeline_page(chromium, tmp_path_factory):
    root = tmp_path_factory.mktemp("timeline")
    run = root / "dense"
    run.mkdir()
    for r in range(2):
        _dense_rank(r).write(run / f"rank-{r}.trace.json.gz")
    loaded = written_page(chromium, ["timeline", str(run)], root / "timeline.html")
    yield loaded
    loaded.page.close()


def _bars(page) -> dict[str, int]:
    return page.evaluate(
        """() => Object.fromEntries(document.getElementById('tk-timeline-0').data
             .map(t => [t.meta, t.base.length]))"""
    )


def _merged(page) -> int:
    return page.evaluate(
        """() => document.getElementById('tk-timeline-0').data
             .flatMap(t => Array.from(t.hovertext || []))
             .filter(h => h.includes('merged at this zoom')).length"""
    )


def _redrawn(page, before: int) -> None:
    page.wait_for_function(f"window.tracekit.redraws > {before}")
    page.wait_for_timeout(50)


def test_timeline_draws_without_errors(timeline_page, chromium):
    assert timeline_page.errors == []
    fig = timeline_page.page.locator("#tk-timeline-0")
    assert fig.locator(".bars .point path").count() > 0
    pixels = pixel_stats(chromium, fig.screenshot())
    assert pixels.std > 10 and pixels.colors > 5, pixels


def test_zoomed_out_runs_of_tiny_kernels_are_merged(timeline_page):
    page = timeline_page.page
    compute = _bars(page)["tracekit:compute"]
    assert 0 < compute < 2 * KERNELS_PER_STEP * STEPS / 10
    assert _merged(page) > 0


def test_step_selector_jumps_to_a_step_and_zoom_shows_each_kernel(timeline_page):
    page = timeline_page.page
    before = page.evaluate("window.tracekit.redraws")
    page.locator("#tk-timeline-0 .updatemenu-button", has_text="step 2").click()
    _redrawn(page, before)
    lo, hi = page.evaluate("document.getElementById('tk-timeline-0')._fullLayout.xaxis.range")
    steps = page.evaluate(
        """() => document.getElementById('tk-timeline-0').data
             .find(t => t.meta === 'tracekit:step')"""
    )
    step2 = [
        (b, b + w) for b, w, h in zip(steps["base"], steps["x"], steps["hovertext"], strict=True)
        if "ProfilerStep#2" in h
    ]  # fmt: skip
    assert len(step2) == 2  # one per rank
    assert lo <= min(s for s, _ in step2) and hi >= max(e for _, e in step2)
    # 40 µs wide: kernels of 1-4 µs are dozens of pixels, none merges
    before = page.evaluate("window.tracekit.redraws")
    page.evaluate(
        "([lo]) => Plotly.relayout('tk-timeline-0', {'xaxis.range': [lo, lo + 0.04]})",
        [lo + (hi - lo) / 2],
    )
    _redrawn(page, before)
    assert _merged(page) == 0
    assert 5 < _bars(page)["tracekit:compute"] < 200
    assert page.evaluate("window.tracekit.lastRedraw.ms") < 1000
    assert timeline_page.errors == []


def test_hover_names_kernel_stream_step_and_phase(timeline_page):
    page = timeline_page.page
    before = page.evaluate("window.tracekit.redraws")
    # rank 0's step 2 starts with the script-named kernel: find it, zoom to it, hover it
    page.evaluate(
        """() => {
            const gd = document.getElementById('tk-timeline-0');
            const t = gd.data.find(t => t.meta === 'tracekit:step');
            const j = Array.from(t.hovertext).findIndex(h => h.includes('ProfilerStep#2'));
            return Plotly.relayout(gd, {'xaxis.range': [t.base[j], t.base[j] + 0.006]});
        }"""
    )
    _redrawn(page, before)
    box = bar_center(page, "tk-timeline-0", "tracekit:compute", "&lt;script")
    assert box["found"] >= 0
    page.mouse.move(box["x"], box["y"])
    label = page.locator("#tk-timeline-0 .hoverlayer .hovertext")
    label.wait_for(timeout=5000)
    text = label.text_content()
    assert EVIL in text and "3.00 µs" in text
    assert "gpu 0 stream 7" in text and "step 2" in text and "phase forward" in text
    assert page.evaluate("typeof window.__x") == "undefined"
    assert timeline_page.errors == []


def test_page_script_merges_like_python(timeline_page, tmp_path_factory):
    """The script's redraw and timeline.view() give the same blocks for one window."""
    from tracekit.analysis import analyze_traces
    from tracekit.load import load
    from tracekit.report.figures import BLOCK_BUDGET
    from tracekit.report.plots import headline_windows
    from tracekit.report.timeline import build_timeline, view

    page = timeline_page.page
    source = Path(timeline_page.page.url.removeprefix("file://")).parent / "dense"
    loaded = load([source])
    a = analyze_traces(loaded.groups)  # keeps the traces
    tl = build_timeline(a.traces["dense"], windows=headline_windows(a, "dense"))
    windows = ((0.0, tl.span_ns / 1e6), (3.0, 6.0), (4.0, 5.5), (5.0, 5.5), (7.25, 7.26))
    for lo_ms, hi_ms in windows:
        before = page.evaluate("window.tracekit.redraws")
        page.evaluate(
            "([lo, hi]) => Plotly.relayout('tk-timeline-0', {'xaxis.range': [lo, hi]})",
            [lo_ms, hi_ms],
        )
        _redrawn(page, before)
        width = page.evaluate("document.getElementById('tk-timeline-0')._fullLayout.xaxis._length")
        blocks = view(tl, lo_ms * 1e6, hi_ms * 1e6, width_px=width, budget=BLOCK_BUDGET)
        want = blocks.groupby(blocks["series"].astype(str)).size().to_dict()
        got = {k.removeprefix("tracekit:"): v for k, v in _bars(page).items() if v}
        assert got == want, (lo_ms, hi_ms)
        merged = int((blocks["count"] > 1).sum())
        assert _merged(page) == merged
