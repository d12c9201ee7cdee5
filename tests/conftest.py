"""Shared fixtures: the real traces beside the checkout (skipped cleanly when absent), a
synthetic run directory, and a headless Chromium for the browser tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import browser
from tests.runs import write_run

ROOT = Path(__file__).resolve().parents[1]
# Beside the checkout, or beside the directory of git worktrees (worktrees/<name>).
SHARED_TRACES = next(
    (
        p
        for p in (ROOT.parent / "shared" / "traces", ROOT.parents[1] / "shared" / "traces")
        if p.is_dir()
    ),
    ROOT.parent / "shared" / "traces",
)


@pytest.fixture(scope="session")
def shared_chrome() -> Path:
    """../shared/traces/chrome (real multi-GPU NCCL traces), or skip."""
    path = SHARED_TRACES / "chrome"
    if not path.is_dir():
        pytest.skip(f"shared traces not present at {path}")
    return path


@pytest.fixture(scope="session")
def shared_nsys() -> Path:
    """../shared/traces/nsys (Nsight Systems SQLite exports), or skip."""
    path = SHARED_TRACES / "nsys"
    if not path.is_dir():
        pytest.skip(f"shared nsys exports not present at {path}")
    return path


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """naive and overlap variants, two GPU ranks each, four steps, with a manifest."""
    return write_run(tmp_path_factory.mktemp("run") / "run")


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """A headless Chromium shared by the session (skips when unavailable)."""
    reason = browser.unavailable()
    if reason:
        pytest.skip(reason)
    instance = browser.acquire()
    try:
        yield instance
    finally:
        browser.release()


@pytest.fixture(scope="module")
def report_page(chromium: Any, run_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The report of ``run_dir``, open in Chromium (one page per test module)."""
    loaded = browser.written_page(
        chromium, ["report", str(run_dir)], tmp_path_factory.mktemp("report") / "report.html"
    )
    yield loaded
    loaded.page.close()
