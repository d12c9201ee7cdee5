"""Where the map tasks run: this process, a local process pool, or a Dask cluster.

``run(tasks, fn, ...)`` applies a picklable ``fn`` to every task and returns the results in
task order, reporting each one as it completes. The engines differ only in where ``fn`` runs;
they return the same results.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any, TypeVar

from tracekit.errors import TracekitError

ENGINES = ("local", "dask")
# Below this many bytes of input, starting worker processes costs more than it saves.
PARALLEL_MIN_BYTES = 8 << 20
# How long to wait for a Dask scheduler given by address.
CONNECT_TIMEOUT_S = 30

T = TypeVar("T")
R = TypeVar("R")
Done = Callable[[int, int, Any, Any], None]  # (done, total, task, result)


def pool_context() -> BaseContext:
    """``fork`` on Linux: workers start without re-running the caller's ``__main__``, so a
    plain script without an ``if __name__ == "__main__":`` guard can use the pool, and they
    inherit the imports already made. Elsewhere ``spawn`` (macOS and Windows cannot fork
    safely), which needs that guard."""
    return multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")


def local_jobs(paths: Sequence[Path], jobs: int | None) -> int:
    """Worker processes for the local engine: ``jobs``, or one per file up to the CPU count
    when the input is large, else 1 (in this process)."""
    if jobs is not None:
        return max(1, min(jobs, len(paths)))
    large = sum(_size(p) for p in paths) >= PARALLEL_MIN_BYTES
    return min(len(paths), os.cpu_count() or 1) if large and len(paths) > 1 else 1


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def run(
    tasks: Sequence[T],
    fn: Callable[[T], R],
    *,
    engine: str = "local",
    scheduler: str | None = None,
    jobs: int | None = None,
    sizes: Sequence[Path] = (),
    done: Done | None = None,
) -> list[R]:
    """``fn`` of every task, in task order. ``engine``: "local" (``jobs`` processes; by default
    chosen from the input ``sizes``) or "dask" (``scheduler`` address, or a LocalCluster of
    ``jobs`` worker processes). ``done`` hears of each task as it completes."""
    if engine == "local":
        if scheduler is not None:
            raise TracekitError("--scheduler needs --engine dask")
        n = local_jobs(sizes, jobs) if sizes else (jobs or 1)
        return _local(tasks, fn, n, done)
    if engine == "dask":
        return _dask(tasks, fn, scheduler, jobs, done)
    raise TracekitError(f"unknown engine {engine!r} (choose from {', '.join(ENGINES)})")


def _local(tasks: Sequence[T], fn: Callable[[T], R], jobs: int, done: Done | None) -> list[R]:
    results: list[Any] = [None] * len(tasks)
    if jobs <= 1 or len(tasks) <= 1:
        for i, task in enumerate(tasks):
            results[i] = fn(task)
            if done:
                done(i + 1, len(tasks), task, results[i])
        return results
    with ProcessPoolExecutor(max_workers=jobs, mp_context=pool_context()) as pool:
        futures = {pool.submit(fn, task): i for i, task in enumerate(tasks)}
        for n, future in enumerate(as_completed(futures), 1):
            i = futures[future]
            results[i] = _result(future, tasks[i])
            if done:
                done(n, len(tasks), tasks[i], results[i])
    return results


def _result(future: Any, task: Any) -> Any:
    """A finished task's result; a worker that died is one line (naming a task in flight)."""
    try:
        return future.result()
    except Exception as e:
        problem = (
            "a worker process died (killed, or out of memory?) with this input in flight: "
            f"{type(e).__name__}"
        )
        path = getattr(task, "path", None)
        raise TracekitError(problem if path else f"task {task!r}: {problem}", path) from e


def _dask(
    tasks: Sequence[T],
    fn: Callable[[T], R],
    scheduler: str | None,
    jobs: int | None,
    done: Done | None,
) -> list[R]:
    try:
        from distributed import Client, LocalCluster
        from distributed import as_completed as dask_completed
    except ImportError as e:
        raise TracekitError("the dask engine needs dask[distributed]: pip install tracekit") from e
    results: list[Any] = [None] * len(tasks)
    if not tasks:
        return results
    cluster = None
    try:
        if scheduler is None:
            cluster = LocalCluster(
                n_workers=jobs or min(len(tasks), os.cpu_count() or 1),
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
            client = Client(cluster)
        else:
            client = Client(scheduler, timeout=f"{CONNECT_TIMEOUT_S}s")
    except OSError as e:
        where = scheduler or "a local cluster"
        raise TracekitError(f"cannot reach the Dask scheduler at {where}: {e}") from e
    try:
        futures = [client.submit(fn, task, pure=False) for task in tasks]
        index = {f.key: i for i, f in enumerate(futures)}
        for n, future in enumerate(dask_completed(futures), 1):
            i = index[future.key]
            results[i] = _result(future, tasks[i])
            if done:
                done(n, len(tasks), tasks[i], results[i])
            future.release()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    return results
