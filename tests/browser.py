"""Headless Chromium for tests, through playwright: one browser per test session.

Browser tests take the ``chromium`` fixture (import it into the test module); it skips with the
reason when playwright or a Chromium binary is missing. ``TRACEKIT_CHROMIUM`` names the binary;
otherwise ``chromium`` (or ``chromium-browser``, ``google-chrome``) on PATH is used.
"""

from __future__ import annotations

import base64
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The machine may have no network: keep Chromium from trying to reach one.
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "/usr/bin/chromium")
VIEWPORT = {"width": 1400, "height": 900}


def chromium_executable() -> str | None:
    """The Chromium binary to drive, or None."""
    named = os.environ.get("TRACEKIT_CHROMIUM")
    if named:
        return named if Path(named).is_file() else None
    for candidate in CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def unavailable() -> str | None:
    """Why browser tests cannot run here, or None when they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright)"
    if chromium_executable() is None:
        return "no Chromium binary (install chromium or set TRACEKIT_CHROMIUM)"
    return None


class _Shared:
    """The session's playwright and browser, started on first use, closed by the last user."""

    playwright: Any = None
    browser: Any = None
    users = 0


def acquire() -> Any:
    if _Shared.browser is None:
        from playwright.sync_api import sync_playwright

        _Shared.playwright = sync_playwright().start()
        _Shared.browser = _Shared.playwright.chromium.launch(
            executable_path=chromium_executable(), args=list(CHROMIUM_ARGS)
        )
    _Shared.users += 1
    return _Shared.browser


def release() -> None:
    _Shared.users -= 1
    if _Shared.users == 0 and _Shared.browser is not None:
        _Shared.browser.close()
        _Shared.playwright.stop()
        _Shared.browser = _Shared.playwright = None


@dataclass
class Loaded:
    """A page that finished drawing its figures."""

    page: Any
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    render_ms: float = 0.0  # navigation start to all figures drawn


def written_page(browser: Any, args: list[str], out: Path) -> Loaded:
    """Run ``tracekit ARGS -o OUT -q`` (it must succeed) and open the page it wrote."""
    from click.testing import CliRunner

    from tracekit.cli import main

    result = CliRunner().invoke(main, [*args, "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return open_page(browser, out)


def open_page(browser: Any, path: Path, timeout_ms: int = 60_000) -> Loaded:
    """Load ``path`` and wait until its figures are drawn (``window.tracekit.rendered``)."""
    page = browser.new_page(viewport=VIEWPORT)
    loaded = Loaded(page)
    page.on("console", lambda m: loaded.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: loaded.errors.append(f"uncaught: {e}"))
    page.goto(Path(path).resolve().as_uri())
    page.wait_for_function("window.tracekit && window.tracekit.rendered", timeout=timeout_ms)
    loaded.render_ms = float(page.evaluate("window.tracekit.renderMs"))
    return loaded


@dataclass(frozen=True)
class Pixels:
    """Statistics of a screenshot's grey levels (0-255)."""

    std: float
    dark_share: float  # pixels clearly darker than a white page
    colors: int  # distinct RGB colours (of at most 4096 sampled pixels' top 4 bits)


def pixel_stats(browser: Any, png: bytes) -> Pixels:
    """Decode ``png`` (with Pillow when installed, else in a blank browser page's canvas)."""
    try:
        from PIL import Image
    except ImportError:
        return _canvas_stats(browser, png)
    import io

    import numpy as np

    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=float)
    return _stats(rgb.reshape(-1, 3))


def _stats(rgb: Any) -> Pixels:
    import numpy as np

    grey = rgb @ np.array([0.299, 0.587, 0.114])
    step = max(len(rgb) // 4096, 1)
    coarse = (rgb[::step].astype(int) >> 4) @ np.array([256, 16, 1])
    return Pixels(float(grey.std()), float((grey < 200).mean()), int(np.unique(coarse).size))


def _canvas_stats(browser: Any, png: bytes) -> Pixels:
    """The same statistics as ``_stats``, computed in a blank page from the decoded PNG."""
    page = browser.new_page()
    try:
        std, dark, colors = page.evaluate(
            """async (b64) => {
                const img = new Image();
                img.src = "data:image/png;base64," + b64;
                await img.decode();
                const c = document.createElement("canvas");
                c.width = img.width; c.height = img.height;
                const ctx = c.getContext("2d");
                ctx.drawImage(img, 0, 0);
                const d = ctx.getImageData(0, 0, c.width, c.height).data;
                const n = d.length / 4, stride = Math.max(1, Math.floor(n / 4096));
                let sum = 0, sq = 0, dark = 0;
                const seen = new Set();
                for (let i = 0; i < n; i++) {
                    const r = d[4 * i], g = d[4 * i + 1], b = d[4 * i + 2];
                    const grey = 0.299 * r + 0.587 * g + 0.114 * b;
                    sum += grey; sq += grey * grey; if (grey < 200) dark++;
                    if (i % stride === 0) seen.add(((r >> 4) << 8) | ((g >> 4) << 4) | (b >> 4));
                }
                const mean = sum / n;
                return [Math.sqrt(Math.max(sq / n - mean * mean, 0)), dark / n, seen.size];
            }""",
            base64.b64encode(png).decode("ascii"),
        )
    finally:
        page.close()
    return Pixels(float(std), float(dark), int(colors))


_BAR_CENTER = """([id, meta, needle]) => {
    const gd = document.getElementById(id);
    const t = gd.data.find(t => t.meta === meta);
    const j = Array.from(t.hovertext).findIndex(h => h.includes(needle));
    const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
    const r = gd.getBoundingClientRect();
    return {x: r.left + xa._offset + xa.l2p(t.base[j] + t.x[j] / 2),
            y: r.top + ya._offset + ya.l2p(t.y[j]), found: j};
}"""


def bar_center(page: Any, div_id: str, meta: str, needle: str) -> dict[str, float]:
    """Page coordinates of the middle of the first bar of the plotly trace ``meta`` in
    ``div_id`` whose hover text holds ``needle``; ``found`` is its index (-1: none)."""
    return page.evaluate(_BAR_CENTER, [div_id, meta, needle])
