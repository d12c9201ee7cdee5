"""Shared fixtures: the real traces beside the checkout, skipped cleanly when absent."""

from __future__ import annotations

from pathlib import Path

import pytest

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
