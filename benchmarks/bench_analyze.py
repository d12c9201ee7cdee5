"""Time tracekit's analysis against HTA's get_comm_comp_overlap and the parsing floor.

    .venv/bin/python benchmarks/bench_analyze.py [TRACE_DIR] [--repeat N]

TRACE_DIR defaults to the largest directory in ../shared/traces/chrome. Each measurement runs
in a fresh process (so imports and caches don't leak between them) and reports the best of
--repeat runs: wall time and peak resident memory. The floor is gunzip + orjson.loads of the
same files, the least any JSON-based analysis must spend.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces" / "chrome"

# Each snippet runs in its own interpreter; it prints seconds spent on the measured work.
FLOOR = """
import gzip, time, orjson, sys
t = time.perf_counter()
for f in sys.argv[1:]:
    with (gzip.open(f) if f.endswith('.gz') else open(f, 'rb')) as fh:
        orjson.loads(fh.read())
print(time.perf_counter() - t)
"""
TRACEKIT = """
import sys, time
from tracekit.analysis import analyze
t = time.perf_counter()
analyze(sys.argv[1:], jobs=1)
print(time.perf_counter() - t)
"""
HTA = """
import logging, os, sys, time
os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
from hta.trace_analysis import TraceAnalysis
logging.disable(logging.WARNING)
t = time.perf_counter()
TraceAnalysis(trace_dir=os.path.dirname(sys.argv[1])).get_comm_comp_overlap(visualize=False)
print(time.perf_counter() - t)
"""


def measure(code: str, files: list[str]) -> tuple[float, float]:
    """(seconds, peak MiB) of one fresh-process run of ``code``."""
    wrapper = (
        "import resource, subprocess, sys\n"
        f"p = subprocess.run([sys.executable, '-c', {code!r}, *sys.argv[1:]],"
        " capture_output=True, text=True, check=True)\n"
        "print(p.stdout.strip().splitlines()[-1], "
        "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", wrapper, *files], capture_output=True, text=True, check=True
    )
    seconds, kib = out.stdout.split()
    return float(seconds), int(kib) / 1024


def largest_dir() -> Path:
    dirs = [d for d in SHARED.iterdir() if d.is_dir()]
    return max(dirs, key=lambda d: sum(f.stat().st_size for f in d.glob("*.json*")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace_dir", nargs="?", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.trace_dir is None and not SHARED.is_dir():
        sys.exit(f"no TRACE_DIR given and {SHARED} is absent")
    trace_dir = args.trace_dir or largest_dir()
    files = sorted(str(f) for f in trace_dir.glob("*.json*"))
    size = sum(Path(f).stat().st_size for f in files) / 2**20
    print(f"input: {trace_dir} ({len(files)} file(s), {size:.2f} MiB on disk)")
    results = {}
    for label, code in (("floor (gunzip+orjson)", FLOOR), ("tracekit analyze", TRACEKIT),
                        ("HTA get_comm_comp_overlap", HTA)):  # fmt: skip
        runs = [measure(code, files) for _ in range(args.repeat)]
        results[label] = (min(r[0] for r in runs), max(r[1] for r in runs))
    floor = results["floor (gunzip+orjson)"][0]
    print(f"{'':28}{'best s':>8}{'x floor':>9}{'peak MiB':>10}")
    for label, (seconds, mib) in results.items():
        print(f"{label:28}{seconds:8.3f}{seconds / floor:9.2f}{mib:10.0f}")
    print(json.dumps({k: {"seconds": v[0], "peak_mib": v[1]} for k, v in results.items()}))


if __name__ == "__main__":
    main()
