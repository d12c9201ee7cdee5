"""How analysis scales with the number of ranks, per engine: N = 1, 2, 4 ... 64 ranks, each a
copy of one trace with its rank changed.

    .venv/bin/python benchmarks/bench_scale.py [--source TRACE] [--events 20000] [--max 64]
        [--engines local,dask] [--jobs 2] [--repeat 1]
    .venv/bin/python benchmarks/bench_scale.py --events 600 --max 4   # a quick check

Per engine and N, in a fresh process: wall time of ``analyze`` (for dask, starting the local
cluster included), the parent's peak resident memory, the peak of the whole process tree
(parent + workers, RSS summed, so pages forked workers share count once per process;
sampled every 20 ms) and the size of the result the parent holds
(the pickled Analysis). The parent should stay flat in N; the tree grows with the workers.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gentrace

RUN = """
import pickle, resource, sys, threading, time
import psutil
from tracekit.analysis import analyze

folder, engine, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])
me, peak, running = psutil.Process(), [0], [True]

def sample():
    while running[0]:
        total = 0
        for p in [me, *me.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        peak[0] = max(peak[0], total)
        time.sleep(0.02)

if __name__ == "__main__":
    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    t = time.perf_counter()
    a = analyze([folder], engine=engine, jobs=jobs)
    seconds = time.perf_counter() - t
    running[0] = False
    watcher.join()
    assert not a.failures, a.failures
    parent = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(seconds, parent, peak[0] / 2**20, len(pickle.dumps(a)) / 1024)
"""


def rank_dirs(root: Path, source: Path, counts: list[int]) -> dict[int, Path]:
    """A directory of N copies of ``source`` (ranks 0..N-1) for every N."""
    out = {}
    for n in counts:
        folder = root / f"n{n}"
        folder.mkdir()
        for rank in range(n):
            gentrace.with_rank(source, rank, folder / f"rank-{rank}.json.gz")
        out[n] = folder
    return out


def measure(folder: Path, engine: str, jobs: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", RUN, str(folder), engine, str(jobs)],
        capture_output=True,
        text=True,
        check=True,
    )
    seconds, parent, tree, result = map(float, out.stdout.split()[-4:])
    return {"seconds": seconds, "parent_mib": parent, "tree_mib": tree, "result_kib": result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, help="a Chrome trace (default: generated)")
    parser.add_argument("--events", type=int, default=20_000, help="events of the generated one")
    parser.add_argument("--max", type=int, default=64, help="largest N (powers of two up to it)")
    parser.add_argument("--engines", default="local,dask")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--repeat", type=int, default=1, help="best of this many runs")
    args = parser.parse_args()
    counts = [n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256) if n <= args.max]
    results = []
    with tempfile.TemporaryDirectory(prefix="tracekit-scale-") as tmp:
        source = args.source
        if source is None:
            source = gentrace.write(Path(tmp) / "base.json.gz", gentrace.trace(args.events))
        dirs = rank_dirs(Path(tmp), source, counts)
        print(f"source: {source}; {args.jobs} worker(s)")
        print(
            f"{'engine':8}{'N':>5}{'best s':>9}{'parent MiB':>12}{'tree MiB':>10}{'result KiB':>12}"
        )
        for engine in args.engines.split(","):
            for n in counts:
                runs = [measure(dirs[n], engine, args.jobs) for _ in range(args.repeat)]
                best = min(runs, key=lambda r: r["seconds"])
                row = {"engine": engine, "ranks": n} | best
                results.append(row)
                print(
                    f"{engine:8}{n:5}{best['seconds']:9.2f}{best['parent_mib']:12.0f}"
                    f"{best['tree_mib']:10.0f}{best['result_kib']:12.1f}",
                    flush=True,
                )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
