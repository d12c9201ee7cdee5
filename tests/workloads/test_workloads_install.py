"""The install: only tracekit is a package; the workloads run from the checkout, and what
run_profiles.sh runs before .venv exists needs nothing but the standard library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from setuptools import find_packages

from tracekit.contract import TRAIN_LOG

REPO = Path(__file__).resolve().parents[2]
tomllib = pytest.importorskip("tomllib")  # Python 3.11+


def test_only_tracekit_is_packaged():
    find = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = find_packages(where=REPO, **find["packages"]["find"])
    assert "tracekit" in packages and "tracekit.load" in packages
    assert not [p for p in packages if not p.startswith("tracekit")], packages


def test_the_installed_environment_has_no_workloads_package(tmp_path):
    """Outside the checkout, `import workloads` finds nothing; tracekit is there."""
    code = "import importlib.util as u; print(u.find_spec('workloads'), u.find_spec('tracekit'))"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    missing, found = proc.stdout.split(" ", 1)
    assert missing == "None" and "tracekit" in found


def test_pre_install_steps_need_only_the_standard_library():
    """`python -S` (no site-packages: no torch, no pandas) runs the contract and the syntax
    checks, as run_profiles.sh does with the system Python before bootstrapping."""
    bare = [sys.executable, "-S", "-m"]
    proc = subprocess.run(
        [*bare, "tracekit.contract"], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert f"train_log={TRAIN_LOG}" in proc.stdout.splitlines()
    proc = subprocess.run(
        [*bare, "workloads.run_settings", "--syntax-only", "--variants", "flat,flat"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "run_profiles: error: variant 'flat' is named twice in --variants (TRACEKIT_VARIANTS)"
    )
