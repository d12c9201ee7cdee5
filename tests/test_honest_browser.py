"""Pictures that never mislead, checked in real headless Chromium: zoomed out, a merged block's
drawn area is its busy time; every rank has an exposed-communication lane; the step buttons
list each choice once; and no chart text is drawn on top of other chart text."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tests.browser import bar_center, written_page
from tests.chrome_trace import TraceBuilder
from tests.runs import COMM_STREAM, NCCL
from tracekit.analysis import analyze
from tracekit.cli import main
from tracekit.report.style import BAR_WIDTH, SERIES_COLORS

pytestmark = pytest.mark.browser

STEP_US = 40_000  # each step 40 ms
PERIOD_US, KERNEL_US = 40, 10  # a 10 µs kernel every 40 µs: the step is 75% idle
STEPS = 3


def _idle_rank(rank: int) -> TraceBuilder:
    """Mostly idle steps: tiny kernels, 25% busy, and one all-reduce that is mostly exposed."""
    b = TraceBuilder(rank=rank, world_size=2)
    for step in range(1, STEPS + 1):
        s = 100 + (step - 1) * (STEP_US + 100)
        b.step(step, s, s + STEP_US)
        b.host_range("forward", s, s + STEP_US / 2)
        b.host_range("backward", s + STEP_US / 2, s + STEP_US)
        for i in range(STEP_US // PERIOD_US - 1):
            at = s + 10 + i * PERIOD_US
            b.kernel("tiny", at, at + KERNEL_US, launch=at - 5)
        b.kernel(NCCL, s + 5000, s + 9000, stream=COMM_STREAM, launch=s + 4990)
    return b


@pytest.fixture(scope="module")
def idle(chromium, tmp_path_factory):
    root = tmp_path_factory.mktemp("idle")
    run = root / "idle"
    run.mkdir()
    for r in range(2):
        _idle_rank(r).write(run / f"rank-{r}.trace.json.gz")
    loaded = written_page(chromium, ["timeline", str(run)], root / "timeline.html")
    yield loaded, analyze([run])
    loaded.page.close()


_DRAWN = """([id, color]) => {
    // Every bar of one colour, as drawn: its on-screen box (px), and the plot's scales.
    const gd = document.getElementById(id);
    const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
    const boxes = Array.from(gd.querySelectorAll('.barlayer .point path'))
        .filter(p => getComputedStyle(p).fill === color)
        .map(p => { const b = p.getBBox(); return [b.x, b.y, b.width, b.height]; });
    return {boxes: boxes, pxPerMs: xa._length / (xa.range[1] - xa.range[0]),
            lanePx: Math.abs(ya.l2p(1) - ya.l2p(0)), range: xa.range};
}"""


def _rgb(hex_color: str) -> str:
    h = hex_color.lstrip("#")
    return "rgb({}, {}, {})".format(*(int(h[i : i + 2], 16) for i in (0, 2, 4)))


def test_zoomed_out_drawn_busy_area_matches_the_figures(idle):
    """On mostly idle steps, the compute lanes drawn zoomed out cover, in area, the compute
    time the figures give (within 3%): a merged block is drawn as high as it is busy."""
    loaded, analysis = idle
    page = loaded.page
    drawn = page.evaluate(_DRAWN, ["tk-timeline-0", _rgb(SERIES_COLORS["compute"])])
    boxes = drawn["boxes"]
    assert 0 < len(boxes) < 400  # thousands of kernels, merged
    full = BAR_WIDTH * drawn["lanePx"]
    heights = sorted(b[3] for b in boxes)
    assert heights[len(heights) // 2] < 0.4 * full  # drawn low: 25% busy, not solid
    area_ms = sum(b[2] * b[3] for b in boxes) / drawn["pxPerMs"] / full
    # the figures: compute time of the headline steps shown (steps 1-2), both ranks
    steps = analysis.steps
    want_ms = steps[steps["step"].isin([1, 2])]["compute_us"].sum() / 1e3
    assert area_ms == pytest.approx(want_ms, rel=0.03)
    # and the hover says how busy a merged block is
    hover = page.evaluate(
        """() => document.getElementById('tk-timeline-0').data
             .find(t => t.meta === 'tracekit:compute').hovertext[0]"""
    )
    assert "merged at this zoom" in hover and "busy " in hover and "(25%)" in hover
    assert loaded.errors == []


def test_zoomed_in_blocks_are_full_height(idle):
    loaded, _ = idle
    page = loaded.page
    initial = page.evaluate("document.getElementById('tk-timeline-0')._fullLayout.xaxis.range")
    _zoom(page, [1.0, 1.2])
    drawn = page.evaluate(_DRAWN, ["tk-timeline-0", _rgb(SERIES_COLORS["compute"])])
    full = BAR_WIDTH * drawn["lanePx"]
    visible = [b for b in drawn["boxes"] if b[2] > 2]
    assert visible and all(b[3] == pytest.approx(full, abs=1.0) for b in visible)
    _zoom(page, initial)


def _zoom(page, x_range: list[float]) -> None:
    before = page.evaluate("window.tracekit.redraws")
    page.evaluate("(r) => Plotly.relayout('tk-timeline-0', {'xaxis.range': r})", x_range)
    page.wait_for_function(f"window.tracekit.redraws > {before}")
    page.wait_for_timeout(50)


def test_every_rank_has_an_exposed_lane_beside_overlap(idle):
    loaded, analysis = idle
    page = loaded.page
    labels = page.evaluate("document.getElementById('tk-timeline-0')._fullLayout.yaxis.ticktext")
    for r in (0, 1):
        i = labels.index(f"rank {r} · overlap")
        assert labels[i + 1] == f"rank {r} · exposed comm"
    drawn = page.evaluate(_DRAWN, ["tk-timeline-0", _rgb(SERIES_COLORS["exposed"])])
    assert drawn["boxes"], "the exposed lane draws bars"
    # their area is the exposed communication of the figures: 75% of the all-reduce
    full = BAR_WIDTH * drawn["lanePx"]
    area_ms = sum(b[2] * b[3] for b in drawn["boxes"]) / drawn["pxPerMs"] / full
    steps = analysis.steps
    want = steps[steps["step"].isin([1, 2])]["exposed_comm_us"].sum() / 1e3
    assert want == pytest.approx(0.75 * 4 * 4, rel=0.02)  # 4 all-reduces of 4 ms
    assert area_ms == pytest.approx(want, rel=0.03)
    box = bar_center(page, "tk-timeline-0", "tracekit:exposed", "exposed comm")
    assert box["found"] >= 0
    page.mouse.move(box["x"], box["y"])
    label = page.locator("#tk-timeline-0 .hoverlayer .hovertext")
    label.wait_for(timeout=5000)
    assert "exposed comm" in label.text_content()


def test_step_buttons_list_each_choice_once(idle):
    loaded, _ = idle
    page = loaded.page
    buttons = page.locator("#tk-timeline-0 .updatemenu-button").all_text_contents()
    # headline steps: every step but the last, as `timeline --help` says
    assert buttons == ["all steps", "step 1", "step 2"]
    help_text = CliRunner().invoke(main, ["timeline", "--help"]).output
    assert "every step but the last" in " ".join(help_text.split())
    before = page.evaluate("window.tracekit.redraws")
    page.locator("#tk-timeline-0 .updatemenu-button", has_text="step 2").click()
    page.wait_for_function(f"window.tracekit.redraws > {before}")
    lo, hi = page.evaluate("document.getElementById('tk-timeline-0')._fullLayout.xaxis.range")
    assert hi - lo == pytest.approx(STEP_US / 1e3 * 1.04, rel=0.05)


# --- no chart text on top of other chart text -----------------------------------------------

_TEXT_BOXES = """(id) => {
    // On-screen boxes of a figure's text: titles, axis titles, tick labels, legend, menus.
    const gd = document.getElementById(id);
    const pick = (selector, kind) => Array.from(gd.querySelectorAll(selector))
        .map(el => el.getBoundingClientRect())
        .filter(r => r.width > 0 && r.height > 0)
        .map(r => ({kind: kind, x0: r.left, y0: r.top, x1: r.right, y1: r.bottom}));
    return [
        ...pick('.g-gtitle .gtitle', 'title'),
        ...pick('.g-xtitle', 'x title'), ...pick('.g-x2title', 'x title'),
        ...pick('.g-ytitle', 'y title'),
        ...pick('.legend', 'legend'),
        ...pick('.updatemenu-container', 'menu'),
        ...pick('.annotation', 'annotation'),
        ...pick('.xtick text', 'x tick'), ...pick('.x2tick text', 'x tick'),
        ...pick('.ytick text', 'y tick'),
    ];
}"""


def _overlaps(boxes: list[dict]) -> list[tuple[str, str]]:
    """Pairs of boxes of different kinds that overlap by more than a pixel each way."""
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            if a["kind"] == b["kind"] and "tick" in a["kind"]:
                continue  # neighbouring tick labels are plotly's to space
            dx = min(a["x1"], b["x1"]) - max(a["x0"], b["x0"])
            dy = min(a["y1"], b["y1"]) - max(a["y0"], b["y0"])
            if dx > 1 and dy > 1:
                out.append((a["kind"], b["kind"]))
    return out


def test_no_overlapping_text_in_the_report(report_page):
    page = report_page.page
    ids = page.evaluate("Array.from(document.querySelectorAll('.tk-figure'), e => e.id)")
    assert {"tk-variants", "tk-breakdown", "tk-phases", "tk-step-0"} <= set(ids)
    for key in ids:
        boxes = page.evaluate(_TEXT_BOXES, key)
        kinds = {b["kind"] for b in boxes}
        if key in ("tk-breakdown", "tk-phases"):
            assert "legend" in kinds, key
        if key == "tk-phases":
            assert "x title" in kinds
        assert _overlaps(boxes) == [], key


def test_no_overlapping_text_in_the_timeline(idle):
    loaded, _ = idle
    boxes = loaded.page.evaluate(_TEXT_BOXES, "tk-timeline-0")
    kinds = {b["kind"] for b in boxes}
    assert {"legend", "menu", "x title", "title"} <= kinds
    assert _overlaps(boxes) == []


def test_no_overlapping_text_in_a_narrow_window(report_page):
    """At a narrow width the legends wrap; they still stay off the axis titles."""
    page = report_page.page
    page.set_viewport_size({"width": 700, "height": 900})
    try:
        page.wait_for_timeout(400)  # plotly's responsive resize
        for key in ("tk-breakdown", "tk-phases"):
            page.evaluate("(id) => Plotly.Plots.resize(id)", key)
            assert _overlaps(page.evaluate(_TEXT_BOXES, key)) == [], key
    finally:
        page.set_viewport_size({"width": 1400, "height": 900})
