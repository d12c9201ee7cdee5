"""Traces -> RankTrace tables: find the files, read them (in parallel when large), keep going
past unreadable ones."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tracekit import engine
from tracekit.config import AnalysisConfig
from tracekit.errors import InternalError, TracekitError
from tracekit.load.chrome import load_chrome
from tracekit.load.discover import Group, discover, is_nsys
from tracekit.schema import RankTrace

Progress = Callable[[int, int, Path, float], None]  # (done, total, file, seconds)


@dataclass(frozen=True)
class Loaded:
    """Readable ranks by group, and one error per input that could not be used."""

    groups: dict[str, tuple[RankTrace, ...]]
    failures: tuple[TracekitError, ...]


def load_file(path: Path, config: AnalysisConfig, *, default_rank: int = 0) -> list[RankTrace]:
    """The ranks in one file (a Chrome trace holds one; an nsys export may hold several).

    A Chrome trace that records no rank (no ``distributedInfo.rank``, no rank in its name) is
    ``default_rank``, and its ``meta["notes"]`` say so. The engine passes the file's index in
    its group's sorted file list (``discover``'s order). Raise TracekitError for bad input.
    """
    if path.is_dir():  # an unreadable sub-directory stands in for its traces (discover)
        try:
            next(path.iterdir(), None)
        except OSError as e:
            raise TracekitError(f"unreadable directory ({e.strerror or e})", path) from None
        raise TracekitError("a directory, not a trace file", path)
    if is_nsys(path):
        from tracekit.load.nsys import load_nsys

        return load_nsys(path, config)
    return load_chrome(path, config, default_rank=default_rank)


Outcome = list[RankTrace] | TracekitError


def load_file_safe(
    path: Path, config: AnalysisConfig, *, default_rank: int = 0
) -> list[RankTrace] | TracekitError:
    """``load_file`` that never raises: bad input is its TracekitError; MemoryError and OSError
    become a TracekitError naming the file; anything else is a bug in tracekit, returned as an
    InternalError that keeps the traceback (for ``--debug``)."""
    try:
        return load_file(path, config, default_rank=default_rank)
    except TracekitError as e:
        return e
    except MemoryError:
        return TracekitError("too large to load into memory", path)
    except RecursionError:
        return TracekitError("nested too deeply to read", path)
    except OSError as e:
        return TracekitError(f"unreadable ({e.strerror or e})", path)
    except Exception as e:  # a bug in tracekit, reported for this file only
        return InternalError(f"{type(e).__name__}: {e}", path, traceback=traceback.format_exc())


def _load_timed(path: Path, config: AnalysisConfig, default_rank: int = 0) -> tuple[Outcome, float]:
    began = time.perf_counter()
    result = load_file_safe(path, config, default_rank=default_rank)
    return result, time.perf_counter() - began


def _load_placed(
    path: Path, config: AnalysisConfig, place: dict[Path, int]
) -> tuple[Outcome, float]:
    return _load_timed(path, config, place[path])


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
    # A rankless trace is numbered by its place in its group's sorted file list.
    place = {f: i for g in groups for i, f in enumerate(g.files)}

    def done(n: int, total: int, path: Path, result: tuple[Outcome, float]) -> None:
        if progress:
            progress(n, total, path, result[1])

    timed = engine.run(
        files, partial(_load_placed, config=config, place=place), jobs=jobs, sizes=files, done=done
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
