"""Traces -> RankTrace tables: find the files, read them (in parallel when large), keep going
past unreadable ones."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tracekit import engine
from tracekit.config import AnalysisConfig
from tracekit.errors import TracekitError
from tracekit.load.chrome import load_chrome
from tracekit.load.discover import Group, discover, is_nsys
from tracekit.schema import RankTrace

Progress = Callable[[int, int, Path, float], None]  # (done, total, file, seconds)


@dataclass(frozen=True)
class Loaded:
    """Readable ranks by group, and one error per input that could not be used."""

    groups: dict[str, tuple[RankTrace, ...]]
    failures: tuple[TracekitError, ...]


def load_file(path: Path, config: AnalysisConfig) -> list[RankTrace]:
    """The ranks in one file (a Chrome trace holds one; an nsys export may hold several)."""
    if is_nsys(path):
        from tracekit.load.nsys import load_nsys

        return load_nsys(path, config)
    return load_chrome(path, config)


Outcome = list[RankTrace] | TracekitError


def _load_timed(path: Path, config: AnalysisConfig) -> tuple[Outcome, float]:
    began = time.perf_counter()
    try:
        result: Outcome = load_file(path, config)
    except TracekitError as e:
        result = e
    except MemoryError:
        result = TracekitError("too large to load into memory", path)
    return result, time.perf_counter() - began


def load(
    paths: Iterable[str | Path],
    config: AnalysisConfig | None = None,
    *,
    progress: Progress | None = None,
    jobs: int | None = None,
) -> Loaded:
    """Read every trace under ``paths`` into memory (``tracekit.analysis.analyze`` is the
    map-reduce path that does not). ``jobs``: worker processes (default: one per file, up to
    the CPU count, when the input is large; 1 reads in this process)."""
    config = config or AnalysisConfig()
    groups: list[Group] = discover(paths)
    files = [f for g in groups for f in g.files]

    def done(n: int, total: int, path: Path, result: tuple[Outcome, float]) -> None:
        if progress:
            progress(n, total, path, result[1])

    timed = engine.run(
        files, partial(_load_timed, config=config), jobs=jobs, sizes=files, done=done
    )
    results: dict[Path, Outcome] = {f: r for f, (r, _) in zip(files, timed, strict=True)}

    failures: list[TracekitError] = []
    by_group: dict[str, tuple[RankTrace, ...]] = {}
    for group in groups:
        seen: dict[int, Path] = {}
        kept: list[RankTrace] = []
        for f in group.files:
            result = results[f]
            if isinstance(result, TracekitError):
                failures.append(result)
                continue
            for trace in result:
                if config.ranks is not None and trace.rank not in config.ranks:
                    continue
                if trace.rank in seen:
                    failures.append(
                        TracekitError(f"rank {trace.rank} is also in {seen[trace.rank]}", f)
                    )
                    continue
                seen[trace.rank] = f
                kept.append(trace)
        if kept:
            by_group[group.name] = tuple(sorted(kept, key=lambda t: t.rank))
    return Loaded(by_group, tuple(failures))
