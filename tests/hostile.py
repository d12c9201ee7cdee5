"""A generator of hostile input: valid JSON or SQLite with values that cannot be trusted.

Every Chrome case starts from ``tests.test_figures.gpu_trace`` (figures worked out by hand:
comm 25 µs, compute 43 µs, overlap 15 µs, 60 %) and spoils one thing. ``CHROME`` maps a case
name to (builder of the trace document, what tracekit must do: "note" words, or "error" words).
The nsys cases build small exports with ``sqlite3`` (``write_nsys``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.chrome_trace import ALLREDUCE_NEW, HOST_PID, MAIN_TID, gpu_trace

Doc = dict[str, Any]


def base() -> Doc:
    return gpu_trace().to_dict()


def _kernels(doc: Doc) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]


def _with(change: Callable[[Doc], None]) -> Callable[[], Doc]:
    def build() -> Doc:
        doc = base()
        change(doc)
        return doc

    return build


def _extra_kernel(doc: Doc, **fields: Any) -> None:
    """A compute kernel [200, 210) on stream 7 (after the last step), with a launch."""
    event = {"ph": "X", "cat": "kernel", "name": "spoilt", "pid": 0, "tid": 7, "ts": 200,
             "dur": 10, "args": {"stream": 7, "correlation": 9999}}  # fmt: skip
    for key, value in fields.items():
        if value is _DROP:
            event.pop(key)
        else:
            event[key] = value
    doc["traceEvents"].append(event)


_DROP = object()


DEEP = "__nested_2000_deep__"  # write_chrome puts 2,000 nested arrays here


def _nest(depth: int) -> str:
    assert depth == 2000
    return DEEP


def _unlaunched_comm(doc: Doc) -> None:
    """The communication kernels lose their correlation: no launch can be found."""
    for e in _kernels(doc):
        if "nccl" in e["name"]:
            del e["args"]["correlation"]


def _duplicate_comm(doc: Doc) -> None:
    """The first NCCL kernel appears twice (same correlation id, same time)."""
    first = next(e for e in _kernels(doc) if "nccl" in e["name"])
    doc["traceEvents"].append(json.loads(json.dumps(first)))


def _step_23_digits(doc: Doc) -> None:
    doc["traceEvents"].append(
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#12345678901234567890123",
         "pid": HOST_PID, "tid": MAIN_TID, "ts": 300, "dur": 5}
    )  # fmt: skip


def _correlation_string(doc: Doc) -> None:
    _kernels(doc)[0]["args"]["correlation"] = "1001"


# case -> (document builder, ("note" | "error", words expected))
CHROME: dict[str, tuple[Callable[[], Doc], tuple[str, str]]] = {
    "distinfo_list": (_with(lambda d: d.update(distributedInfo=[0, 2])), ("note", "not an object")),
    "distinfo_string": (
        _with(lambda d: d.update(distributedInfo="rank 0")),
        ("note", "not an object"),
    ),
    "devprops_strings": (_with(lambda d: d.update(deviceProperties=["A100", 7, None])), ("ok", "")),
    "rank_1e30": (
        _with(lambda d: d["distributedInfo"].update(rank=10**30)),
        ("error", "is not a usable rank"),
    ),
    "step_23_digits": (_with(_step_23_digits), ("note", "step number beyond int64")),
    "correlation_string": (_with(_correlation_string), ("note", "correlation that is not an")),
    "dur_list": (
        _with(lambda d: _extra_kernel(d, dur=[1, 2])),
        ("note", "1 events dropped: invalid dur"),
    ),
    "dur_null": (
        _with(lambda d: _extra_kernel(d, dur=None)),
        ("note", "1 events dropped: invalid dur"),
    ),
    "dur_nan": (_with(lambda d: _extra_kernel(d, dur=float("nan"))), ("note", "invalid dur")),
    "dur_missing": (_with(lambda d: _extra_kernel(d, dur=_DROP)), ("note", "invalid dur")),
    "cat_missing": (_with(lambda d: _extra_kernel(d, cat=_DROP)), ("note", "missing cat")),
    "dur_1e30": (
        _with(lambda d: _extra_kernel(d, dur=1e30)),
        ("note", "dropped: timestamp beyond"),
    ),
    "dur_8_days": (
        _with(lambda d: _extra_kernel(d, dur=8 * 86400e6)),
        ("note", "longer than 7 days"),
    ),
    "ts_1e18": (_with(lambda d: _extra_kernel(d, ts=1e18)), ("note", "timestamp beyond int64 ns")),
    "args_2000_deep": (
        _with(lambda d: _kernels(d)[0]["args"].update(extra=_nest(2000))),
        ("error", "nested too deeply"),
    ),
    "duplicate_correlation": (_with(_duplicate_comm), ("note", "counted once")),
    "nccl_unlaunched": (_with(_unlaunched_comm), ("note", "placed in steps by their start")),
}


def write_chrome(doc: Doc, path: Path) -> Path:
    """Write a document as JSON (NaN written as NaN, as Python's json does)."""
    text = json.dumps(doc).replace(json.dumps(DEEP), "[" * 2000 + "]" * 2000)
    path.write_text(text)
    return path


# --- nsys ----------------------------------------------------------------------------------

PID_A, PID_B = 4321, 4322
KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"


def write_nsys(path: Path, rows: list[tuple[Any, ...]], *, extra_sql: tuple[str, ...] = ()) -> Path:
    """A small export: kernels (start, end, deviceId, streamId, correlationId, globalPid,
    shortName) and, for every kernel, a runtime call at start - 1 with its correlation id."""
    with sqlite3.connect(path) as db:
        db.execute(
            f"CREATE TABLE {KERNELS} (start INTEGER, end INTEGER, deviceId INTEGER, "
            "streamId INTEGER, correlationId INTEGER, globalPid INTEGER, shortName TEXT)"
        )
        db.executemany(f"INSERT INTO {KERNELS} VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        db.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, "
            "correlationId INTEGER, globalTid INTEGER)"
        )
        db.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?)",
            [
                (r[0] - 1 if isinstance(r[0], int) else 0, r[0], r[4], r[5])
                for r in rows
                if isinstance(r[5], int)
            ],
        )
        for sql in extra_sql:
            db.execute(sql)
    return path


def nsys_two_ranks() -> list[tuple[Any, ...]]:
    """Process A on GPU 0 and process B on GPU 1: gemm [0,100) and allreduce [50,150) each."""
    rows = []
    for pid, device in ((PID_A, 0), (PID_B, 1)):
        rows.append((1000, 1100, device, 7, 1, pid << 24, "gemm"))
        rows.append((1050, 1150, device, 9, 2, pid << 24, ALLREDUCE_NEW))
    return rows
