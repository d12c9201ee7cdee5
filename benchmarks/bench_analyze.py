"""Time tracekit's analysis (both parsers) against HTA's get_comm_comp_overlap and the
parsing floor, on the largest shared trace and on a generated 200k-event trace.

    .venv/bin/python benchmarks/bench_analyze.py [TRACE_DIR ...] [--repeat 3] [--events 200000]
    .venv/bin/python benchmarks/bench_analyze.py --events 3000 --repeat 1 --no-shared  # a check

Inputs: each TRACE_DIR given, else the largest directory in ../shared/traces/chrome (unless
--no-shared), plus one generated trace of --events events (0: none). Each measurement runs in
a fresh process (so imports and caches don't leak between them) and reports the best of
--repeat runs: wall time of the measured work and peak resident memory of that process. The
floor is gunzip + orjson.loads of the same files, the least any JSON-based analysis must spend.
The parsers are AnalysisConfig(parser="fast" | "hta"); a tracekit without that option is
measured once, as "tracekit analyze".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gentrace

from tracekit.config import AnalysisConfig

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
import os, sys, time
from tracekit.analysis import analyze
from tracekit.config import AnalysisConfig
parser = os.environ.get("TRACEKIT_BENCH_PARSER")
config = AnalysisConfig(parser=parser) if parser else AnalysisConfig()
t = time.perf_counter()
analyze(sys.argv[1:], config, jobs=1)
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


def measure(code: str, files: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(seconds, peak MiB) of one fresh-process run of ``code``."""
    wrapper = (
        "import resource, subprocess, sys\n"
        f"p = subprocess.run([sys.executable, '-c', {code!r}, *sys.argv[1:]],"
        " capture_output=True, text=True, check=True)\n"
        "print(p.stdout.strip().splitlines()[-1], "
        "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", wrapper, *files],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ | (env or {}),
    )
    seconds, kib = out.stdout.split()
    return float(seconds), int(kib) / 1024


def largest_dir() -> Path:
    dirs = [d for d in SHARED.iterdir() if d.is_dir()]
    return max(dirs, key=lambda d: sum(f.stat().st_size for f in d.glob("*.json*")))


def runners() -> list[tuple[str, str, dict[str, str]]]:
    """(label, snippet, environment) of everything measured."""
    out = [("floor (gunzip+orjson)", FLOOR, {})]
    if "parser" in {f.name for f in dataclasses.fields(AnalysisConfig)}:
        for parser in ("fast", "hta"):
            out.append((f"tracekit, {parser} parser", TRACEKIT, {"TRACEKIT_BENCH_PARSER": parser}))
    else:
        out.append(("tracekit analyze", TRACEKIT, {}))
    out.append(("HTA get_comm_comp_overlap", HTA, {}))
    return out


def bench(trace_dir: Path, repeat: int) -> dict[str, dict[str, float]]:
    files = sorted(str(f) for f in trace_dir.glob("*.json*"))
    size = sum(Path(f).stat().st_size for f in files) / 2**20
    print(f"\ninput: {trace_dir} ({len(files)} file(s), {size:.2f} MiB on disk)")
    results = {}
    for label, code, env in runners():
        runs = [measure(code, files, env) for _ in range(repeat)]
        results[label] = {"seconds": min(r[0] for r in runs), "peak_mib": max(r[1] for r in runs)}
    floor = results["floor (gunzip+orjson)"]["seconds"]
    print(f"{'':30}{'best s':>8}{'x floor':>9}{'peak MiB':>10}")
    for label, r in results.items():
        print(f"{label:30}{r['seconds']:8.3f}{r['seconds'] / floor:9.2f}{r['peak_mib']:10.0f}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace_dirs", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--events", type=int, default=200_000, help="generated trace (0: none)")
    parser.add_argument("--no-shared", action="store_true", help="skip the shared traces")
    args = parser.parse_args()
    dirs = list(args.trace_dirs)
    if not dirs and not args.no_shared:
        if SHARED.is_dir():
            dirs.append(largest_dir())
        else:
            print(f"{SHARED} is absent: no shared trace measured", file=sys.stderr)
    report = {}
    with tempfile.TemporaryDirectory(prefix="tracekit-bench-") as tmp:
        if args.events:
            generated = Path(tmp) / f"generated-{args.events}"
            generated.mkdir()
            gentrace.write(generated / "rank-0.json.gz", gentrace.trace(args.events))
            dirs.append(generated)
        for d in dirs:
            report[d.name] = bench(d, args.repeat)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
