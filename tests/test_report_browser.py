"""The report in real headless Chromium: it draws, without errors, and trace strings stay text."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser import bar_center, pixel_stats, written_page
from tests.runs import EVIL, write_variant

pytestmark = pytest.mark.browser

FIGURES = ("tk-breakdown", "tk-phases", "tk-step-0", "tk-step-1")


def test_report_loads_without_console_errors(report_page):
    assert report_page.errors == []
    assert report_page.render_ms < 10_000


def test_every_figure_renders(report_page, chromium):
    page = report_page.page
    for key in FIGURES:
        fig = page.locator(f"#{key}")
        assert fig.locator(".main-svg").count() >= 1, key
        assert fig.locator(".bars .point path").count() > 0, key
        pixels = pixel_stats(chromium, fig.screenshot())
        assert pixels.std > 10 and pixels.colors > 5 and pixels.dark_share > 0.01, (key, pixels)


def test_kernel_name_with_a_script_tag_stays_text(report_page):
    page = report_page.page
    assert page.evaluate("typeof window.__x") == "undefined"
    # the kernel table shows it shortened, as text, with the full name on hover (title)
    titles = page.evaluate("Array.from(document.querySelectorAll('td.name'), td => td.title)")
    assert EVIL in titles
    assert "<…>window.__x=1<…>" in page.locator("body").inner_text()
    assert page.evaluate("document.querySelectorAll('main script').length") == 0


def test_long_kernel_names_fit_on_one_line(report_page):
    """Kernel name cells are one line high: shortened, the full name in the title."""
    page = report_page.page
    cells = page.evaluate(
        """() => Array.from(document.querySelectorAll('td.name'), td => {
            const r = td.getBoundingClientRect();
            return [td.title, td.textContent.trim(), r.height];
        })"""
    )
    assert cells
    long_names = [c for c in cells if len(c[0]) > 72]
    assert long_names, "the fixture has a long C++ kernel name"
    for title, text, height in cells:
        assert height < 30, (title, height)
        assert len(text) <= 72


def _zoom(page, key: str, lo_ms: float, hi_ms: float) -> None:
    before = page.evaluate("window.tracekit.redraws")
    page.evaluate(
        "([key, lo, hi]) => Plotly.relayout(key, {'xaxis.range': [lo, hi]})", [key, lo_ms, hi_ms]
    )
    page.wait_for_function(f"window.tracekit.redraws > {before}")
    page.wait_for_timeout(100)


def test_hover_shows_the_kernel_name_as_text(report_page):
    page = report_page.page
    # naive's step 2 timeline; the kernel runs 206-208 µs after rank 0's step start
    _zoom(page, "tk-step-0", 0.2055, 0.2085)
    box = bar_center(page, "tk-step-0", "tracekit:compute", "&lt;script")
    assert box["found"] >= 0
    page.mouse.move(box["x"], box["y"])
    label = page.locator("#tk-step-0 .hoverlayer .hovertext")
    label.wait_for(timeout=5000)
    text = label.text_content()
    assert EVIL in text
    assert "stream 7" in text and "step 2" in text and "phase forward" in text
    assert "2.00 µs" in text
    assert page.locator("#tk-step-0 .hoverlayer script").count() == 0
    assert page.evaluate("typeof window.__x") == "undefined"
    assert report_page.errors == []


def test_step_timelines_share_one_time_axis(report_page):
    page = report_page.page
    _zoom(page, "tk-step-1", 0.1, 0.3)
    ranges = page.evaluate(
        "() => ['tk-step-0', 'tk-step-1'].map(k => "
        "document.getElementById(k)._fullLayout.xaxis.range.map(Number))"
    )
    assert ranges[0] == pytest.approx([0.1, 0.3])
    assert ranges[1] == pytest.approx([0.1, 0.3])


def test_variant_named_like_html_stays_text(chromium, tmp_path: Path):
    name = '<img src=x onerror="window.__y=1">'
    variant = write_variant(tmp_path / name, "overlap", steps=2)
    loaded = written_page(chromium, ["report", str(variant)], tmp_path / "report.html")
    try:
        page = loaded.page
        assert loaded.errors == []
        assert page.evaluate("typeof window.__y") == "undefined"
        assert page.locator("main img").count() == 0
        assert name in page.locator("#tk-step-0 .gtitle").text_content()
        assert name in page.locator("table").first.inner_text()
    finally:
        loaded.page.close()
