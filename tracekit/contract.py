"""The names the workloads, run_profiles.sh and the analysis share, declared once.

Variants, phases and the step prefix are what the workloads write into traces (NVTX and
``record_function`` ranges) and what the analysis looks for; the file names are the layout of a
run directory: a manifest and one sub-directory per variant, holding per-rank Chrome traces,
optionally an Nsight Systems report, and the timing record.

``python -m tracekit.contract`` prints them as shell assignments, which run_profiles.sh reads
(``eval``), so the script never re-types a name. Standard library only: it runs before the
virtual environment exists.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Iterable

# DDP variants, in the order they are run and shown (others follow, alphabetically).
NAIVE, FLAT, OVERLAP, BUCKETED, TORCH_DDP = "naive", "flat", "overlap", "bucketed", "torch_ddp"
VARIANTS = (NAIVE, FLAT, OVERLAP, BUCKETED, TORCH_DDP)

# Phase ranges inside every training step, in the order they run.
FORWARD, BACKWARD, ALLREDUCE, OPTIMIZER = "forward", "backward", "allreduce", "optimizer"
PHASES = (FORWARD, BACKWARD, ALLREDUCE, OPTIMIZER)

STEP_PREFIX = "step#"  # the workloads' step ranges: step#<global step index>
PROFILER_STEP_PREFIX = "ProfilerStep#"  # torch.profiler's own step ranges

# Run directory.
MANIFEST = "manifest.json"  # the run's command, settings, environment and files
SUMMARY_JSON = "summary.json"  # cross-variant comparison written after the run
SUMMARY_CSV = "summary.csv"
REPORT = "report.html"
INCOMPLETE = "INCOMPLETE"  # present while a run is going on or after it was interrupted
# Variant directory.
TIMING_JSON = "timing.json"  # per-variant timing record written by workloads.train
TIMING_CSV = "timing.csv"  # one row per rank and measured step
TIMING_SUMMARY_CSV = "timing-summary.csv"  # the variant's row of the results table
TRACE_NAME = "rank-{rank}.trace.json.gz"  # per-rank torch.profiler trace
TRAIN_LOG = "train.log"  # output of the torch.profiler (or unprofiled) run
NSYS_STEM = "profile"  # nsys profile --output <variant dir>/profile
NSYS_REPORT = f"{NSYS_STEM}.nsys-rep"
NSYS_LOG = "nsys.log"  # output of the run under nsys
NSYS_RUN_DIR = "nsys-run"  # timing record of the run under nsys

# JSON files in a run tree that are records, not traces.
RECORD_FILES = frozenset({MANIFEST, SUMMARY_JSON, TIMING_JSON})


def step_pattern(prefix: str) -> str:
    """Regular expression for a step range named ``<prefix><N>``; group 1 is N."""
    return rf"^{re.escape(prefix)}(\d+)$"


def names_pattern(names: tuple[str, ...]) -> str:
    """Regular expression matching exactly one of ``names``."""
    return "^(" + "|".join(map(re.escape, names)) + ")$"


STEP_PATTERNS = (step_pattern(PROFILER_STEP_PREFIX), step_pattern(STEP_PREFIX))
PHASE_PATTERN = names_pattern(PHASES)

# What run_profiles.sh reads, by shell variable name (its variants are checked, against
# VARIANTS, by workloads.run_settings; the manifest is written by workloads.manifest).


def plan_buckets(sizes: Iterable[float], cap: float) -> list[list[int]]:
    """The bucketed variant's rule, shared by the workloads and the what-if model: group
    consecutive gradient sizes (bytes, in ready order) into buckets. Greedy: an item joins the
    open bucket unless that would take it past ``cap``, in which case the bucket is closed
    first; a bucket exceeds ``cap`` only when it holds a single larger item. Returns lists of
    indices into ``sizes``."""
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0.0
    for i, size in enumerate(sizes):
        if current and filled + size > cap:
            buckets.append(current)
            current, filled = [], 0.0
        current.append(i)
        filled += float(size)
    if current:
        buckets.append(current)
    return buckets


SHELL = {
    "summary_json": SUMMARY_JSON,
    "report_html": REPORT,
    "incomplete": INCOMPLETE,
    "train_log": TRAIN_LOG,
    "nsys_stem": NSYS_STEM,
    "nsys_log": NSYS_LOG,
    "nsys_run_dir": NSYS_RUN_DIR,
}


def shell_assignments() -> str:
    """``name=value`` lines (values quoted for the shell) of :data:`SHELL`."""
    return "".join(f"{key}={shlex.quote(value)}\n" for key, value in SHELL.items())


if __name__ == "__main__":
    sys.stdout.write(shell_assignments())
