"""Names of the files in a run directory, shared by the workloads, run_profiles.sh and reports.

A run directory holds a manifest and one sub-directory per variant; each variant directory
holds per-rank Chrome traces, optionally an Nsight Systems report, and the timing record.
"""

from __future__ import annotations

MANIFEST = "manifest.json"  # the run's command, settings, environment and files
SUMMARY_JSON = "summary.json"  # cross-variant comparison written after the run
SUMMARY_CSV = "summary.csv"
REPORT = "report.html"
INCOMPLETE = "INCOMPLETE"  # present while a run is going on or after it was interrupted
TIMING_JSON = "timing.json"  # per-variant timing record written by workloads.train
TIMING_CSV = "timing.csv"  # one row per rank and measured step
TIMING_SUMMARY_CSV = "timing-summary.csv"  # the variant's row of the results table
TRACE_NAME = "rank-{rank}.trace.json.gz"  # per-rank torch.profiler trace
NSYS_REPORT = "profile.nsys-rep"  # written by run_profiles.sh (nsys --output profile)

# The order variants are shown in (others follow, alphabetically).
VARIANT_ORDER = ("naive", "flat", "overlap", "bucketed", "torch_ddp")

# JSON files in a run tree that are records, not traces.
RECORD_FILES = frozenset({MANIFEST, SUMMARY_JSON, TIMING_JSON})
