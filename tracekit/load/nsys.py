"""Nsight Systems exports (``.sqlite``, or ``.nsys-rep`` through ``nsys export``) -> RankTrace.

Read with the standard library's ``sqlite3`` and pandas. The tables used:

- ``CUPTI_ACTIVITY_KIND_KERNEL``, ``_MEMCPY``, ``_MEMSET``: device activity (required: kernels);
- ``CUPTI_ACTIVITY_KIND_RUNTIME``: the CUDA calls that launched it, matched on
  (process, ``correlationId``); a kernel's ``launch_ns`` is the start of that call;
- ``NVTX_EVENTS`` (+ ``StringIds``): host ranges; ``step#N`` steps and phases, projected onto the
  GPU through the kernels launched inside them (``tracekit.load.ranges``);
- ``PROCESSES``, ``TARGET_INFO_*``, ``META_DATA_EXPORT``: names and versions for ``meta``.

A rank is one (process, GPU) pair that ran at least one kernel. Nsight records no distributed
rank, so ranks are numbered 0, 1, ... in the order of (OS pid, CUDA device id): with torchrun's
one process per GPU, launched in local-rank order, that is the local rank. ``meta`` keeps the
pid, device and global pid. ``world_size`` is the number of ranks in the file (one node).

Times are the export's integer nanoseconds (one session clock for every process).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracekit.classify import gpu_kinds
from tracekit.config import AnalysisConfig
from tracekit.errors import TracekitError
from tracekit.load import comm_args
from tracekit.load.kernels import gpu_kernel_table
from tracekit.load.ranges import host_ranges, project_onto_gpu
from tracekit.schema import (
    COMM,
    MEMORY,
    RANGE_COLUMNS,
    RANGE_PHASE,
    RANGE_STEP,
    UNKNOWN,
    RankTrace,
    conform,
)

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_TABLE = "NVTX_EVENTS"
STRINGS_TABLE = "StringIds"

SQLITE_MAGIC = b"SQLite format 3\x00"
# globalPid / globalTid pack (vm id, pid, tid); the pid is bits 24-47, the tid bits 0-23.
PROCESS_SHIFT, PID_MASK = 24, 0xFFFFFF
# NVTX_EVENTS.eventType of ranges: NvtxPushPopRange, NvtxStartEndRange and their Nvtxt forms.
NVTX_RANGE_TYPES = (59, 60, 70, 71)
# Kernel name columns, most readable first; Kineto's Chrome traces use demangled names too.
KERNEL_NAME_COLUMNS = ("demangledName", "shortName", "mangledName", "name")
ACTIVITY_TABLES = (KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE)
ACTIVITY_COLUMNS = ("start", "end", "deviceId", "streamId", "correlationId")

# CUpti_ActivityMemcpyKind and CUpti_ActivityMemoryKind, for Kineto-style copy names.
_COPY_KINDS = {
    1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP",
}  # fmt: skip
_MEMORY_KINDS = {
    0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
    5: "Device Static", 6: "Managed Static",
}  # fmt: skip


def load_nsys(path: Path, config: AnalysisConfig) -> list[RankTrace]:
    """Every (process, GPU) rank of an Nsight Systems export or report (see the module doc)."""
    export = sqlite_for(path)
    data = read_export(export)
    pairs = (
        data.activity.loc[data.activity["table"] == KERNEL_TABLE, ["process", "device"]]
        .drop_duplicates()
        .assign(pid=lambda f: f["process"] & PID_MASK)
        .sort_values(["pid", "device", "process"], ignore_index=True)
    )
    if pairs.empty:
        raise TracekitError(f"no kernels in {KERNEL_TABLE}: nothing ran on a GPU", export)
    by_pair = dict(tuple(data.activity.groupby(["process", "device"], sort=False)))
    nvtx = dict(tuple(data.nvtx.groupby("process", sort=False)))
    traces = []
    for rank, (process, device, pid) in enumerate(pairs.itertuples(index=False, name=None)):
        identity = {
            "pid": int(pid),
            "device": int(device),
            "global_pid": int(process) << PROCESS_SHIFT,
            "process": data.processes.get(int(process), ""),
            "device_name": data.devices.get(int(device), ""),
        }
        rows = by_pair[(process, device)]
        ranges = nvtx.get(process, data.nvtx.iloc[:0])
        traces.append(_rank_trace(rank, rows, ranges, data, export, config, identity, len(pairs)))
    return traces


# --- per rank ------------------------------------------------------------------------------


def _rank_trace(
    rank: int,
    rows: pd.DataFrame,
    nvtx: pd.DataFrame,
    data: Export,
    path: Path,
    config: AnalysisConfig,
    identity: dict[str, Any],
    n_ranks: int,
) -> RankTrace:
    host = host_ranges(nvtx[["name", "start_ns", "end_ns"]], rank, config)
    launch = _launches(rows, data.runtime)
    kind = gpu_kinds(rows["name"], config.classification)
    is_comm = np.asarray(kind == COMM)
    is_memory = np.asarray(kind == MEMORY)
    collective = np.where(is_comm, comm_args.from_kernel_name(rows["name"]).to_numpy(), "")
    kernels = gpu_kernel_table(
        rank,
        rows,
        kind=kind,
        launch=launch,
        steps=host[host["kind"] == RANGE_STEP],
        collective=collective,
        nbytes=np.where(is_memory, rows["bytes"].to_numpy(), UNKNOWN),
    )
    projected = project_onto_gpu(host[host["kind"] == RANGE_PHASE], kernels)
    ranges = conform(pd.concat([host, projected], ignore_index=True), RANGE_COLUMNS)
    return RankTrace(
        rank=rank,
        source=path,
        kernels=kernels,
        ranges=ranges,
        platform="gpu",
        world_size=n_ranks,
        meta=identity
        | {
            "backend": None,
            "nsys_version": data.version,
            "phase_source": "projected" if len(projected) else "none",
            "nvtx_ranges": len(nvtx) if data.has_nvtx else None,
            "unlaunched": int((launch < 0).sum()),
            "notes": _notes(nvtx, host, data, launch),
        },
    )


def _launches(rows: pd.DataFrame, runtime: pd.Series) -> np.ndarray:
    """Start of the CUDA runtime call with each row's correlation id in its process."""
    keys = pd.MultiIndex.from_arrays([rows["process"], rows["correlation"]])
    at = runtime.index.get_indexer(keys)  # integer lookup: no float round trip of ns times
    starts = np.append(runtime.to_numpy(np.int64), UNKNOWN)  # at == -1 picks the sentinel
    return starts[at]


def _notes(nvtx: pd.DataFrame, host: pd.DataFrame, data: Export, launch: np.ndarray) -> list[str]:
    """What the loader could not find, for the analysis notes."""
    out = list(data.notes)
    if not data.has_nvtx:
        out.append(f"no {NVTX_TABLE} table (profiled without --trace=nvtx): no steps or phases")
    elif len(host) == 0:
        examples = ", ".join(repr(n) for n in nvtx["name"].drop_duplicates().head(2))
        out.append(
            f"{len(nvtx)} NVTX ranges, none named step#N or a phase"
            + (f" (e.g. {examples})" if examples else "")
        )
    missing = int((launch < 0).sum())
    if missing and len(data.runtime) == 0:
        out.append(
            f"no {RUNTIME_TABLE} rows: launch times unknown, so GPU rows are placed in steps by "
            "their start time"
        )
    elif missing:
        out.append(
            f"{missing} of {len(launch)} GPU rows have no CUDA runtime call with their "
            "correlation id: classified by name and placed in steps by their start time"
        )
    return out


# --- reading the export --------------------------------------------------------------------


@dataclass(frozen=True)
class Export:
    """The parts of an export tracekit uses, as frames with tracekit's column names."""

    activity: pd.DataFrame  # table, process, device, stream, name, start_ns, end_ns, ...
    runtime: pd.Series  # launch_ns by (process, correlation)
    nvtx: pd.DataFrame  # process, name, start_ns, end_ns
    has_nvtx: bool
    processes: dict[int, str]  # process key (globalPid >> 24) -> executable name
    devices: dict[int, str]  # CUDA device id -> GPU name
    version: str | None  # Nsight Systems version that exported the file
    notes: tuple[str, ...] = ()  # rows left out, for every rank's notes


def read_export(path: Path) -> Export:
    """Read an Nsight Systems SQLite export; TracekitError naming the file when unusable."""
    _precheck(path)
    with _database(path) as db:
        tables = _tables(db, path)
        if KERNEL_TABLE not in tables:
            raise TracekitError(
                f"no {KERNEL_TABLE} table: not an Nsight Systems export with CUDA kernels "
                "(profile with --trace=cuda)",
                path,
            )
        strings = _strings(db, tables)
        read = {
            t: _activity(db, t, tables[t], strings, path) for t in ACTIVITY_TABLES if t in tables
        }
        activity = pd.concat([frame for frame, _ in read.values()], ignore_index=True)
        notes = [
            f"{dropped} {table} rows left out: NULL or non-integer start, end, deviceId or "
            "globalPid (not attributable to a GPU and process)"
            for table, (_, dropped) in read.items()
            if dropped
        ]
        runtime = _runtime(db, tables, path)
        nvtx = _nvtx(db, tables, strings, path)
        return Export(
            activity=activity,
            runtime=runtime,
            nvtx=nvtx,
            has_nvtx=NVTX_TABLE in tables,
            processes=_processes(db, tables),
            devices=_devices(db, tables, strings),
            version=_version(db, tables),
            notes=tuple(notes),
        )


def _precheck(path: Path) -> None:
    """Clear messages for files that are not (whole) SQLite databases."""
    if not path.is_file():
        raise TracekitError("no such file", path)
    size = path.stat().st_size
    if size == 0:
        raise TracekitError("empty file", path)
    with path.open("rb") as fh:
        header = fh.read(100)
    if not header.startswith(SQLITE_MAGIC[: len(header)]) or len(header) < len(SQLITE_MAGIC):
        what = "looks like JSON; name it .json" if header.lstrip()[:1] == b"{" else "wrong magic"
        raise TracekitError(f"not an SQLite database ({what})", path)
    if len(header) < 100:
        raise TracekitError(f"truncated SQLite file ({size} bytes, shorter than its header)", path)
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    # The page count in the header is valid when the two change counters agree (SQLite >= 3.7).
    counted = header[24:28] == header[92:96] and pages > 0
    if page_size < 512 or size % page_size or (counted and size < pages * page_size):
        expected = f" of {pages * page_size}" if counted else ""
        raise TracekitError(f"truncated SQLite file ({size}{expected} bytes)", path)


@contextmanager
def _database(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection; SQLite errors become one-line TracekitErrors."""
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            yield db
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as e:
        raise TracekitError(f"unreadable SQLite database ({e})", path) from None


def _query(db: sqlite3.Connection, sql: str, *, raw: bool = False) -> pd.DataFrame:
    """Rows of a query; ``raw``: every column as the Python objects SQLite returned (no float
    round trip of ns times when a column holds a NULL, text kept as text)."""
    if not raw:
        return pd.read_sql_query(sql, db)
    cursor = db.execute(sql)
    names = [d[0] for d in cursor.description]
    return pd.DataFrame(cursor.fetchall(), columns=names, dtype=object)


def _tables(db: sqlite3.Connection, path: Path) -> dict[str, set[str]]:
    """Table name -> its column names."""
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    if not names:
        raise TracekitError("an SQLite database with no tables", path)
    return {t: {r[1] for r in db.execute(f'PRAGMA table_info("{t}")')} for t in names}


def _strings(db: sqlite3.Connection, tables: dict[str, set[str]]) -> pd.Series:
    """StringIds as a Series of text by id (empty when the table is absent)."""
    if not {"id", "value"} <= tables.get(STRINGS_TABLE, set()):
        return pd.Series(dtype=object)
    frame = _query(db, f'SELECT id, value FROM "{STRINGS_TABLE}"')
    return pd.Series(frame["value"].to_numpy(dtype=object), index=frame["id"].to_numpy())


def _text(values: pd.Series, strings: pd.Series) -> pd.Series:
    """Names stored inline or as StringIds ids; '' where neither resolves."""
    if pd.api.types.is_numeric_dtype(values):
        ids = pd.to_numeric(values, errors="coerce")
        out = pd.Series(strings.reindex(ids).to_numpy(dtype=object), index=values.index)
    else:  # inline text, or ids among other values (raw columns)
        lookup = strings.to_dict()
        out = pd.Series(
            [
                v if isinstance(v, str) else lookup.get(v) if type(v) is int else None
                for v in values
            ],
            index=values.index,
            dtype=object,
        )
    return out.where(out.notna(), "")


def _process_column(columns: set[str], table: str, path: Path) -> str:
    """SQL for the process key (globalPid >> 24) of a table's rows; NULL unless an integer
    (SQLite would shift text as 0)."""
    for column in ("globalPid", "globalTid"):
        if column in columns:
            return (
                f"""(CASE WHEN typeof("{column}") = 'integer' """
                f'THEN "{column}" >> {PROCESS_SHIFT} END)'
            )
    raise TracekitError(f"{table} has no globalPid or globalTid column (unknown nsys schema)", path)


def _require(columns: set[str], needed: tuple[str, ...], table: str, path: Path) -> None:
    missing = [c for c in needed if c not in columns]
    if missing:
        raise TracekitError(
            f"{table} lacks column(s) {', '.join(missing)} (an nsys schema tracekit cannot read)",
            path,
        )


def _activity(
    db: sqlite3.Connection, table: str, columns: set[str], strings: pd.Series, path: Path
) -> tuple[pd.DataFrame, int]:
    """Rows of one activity table (process, device, stream, name, times, correlation, bytes),
    and how many rows were left out for lacking an integer start, end, deviceId or process."""
    _require(columns, ACTIVITY_COLUMNS, table, path)
    extra = [c for c in ("bytes", "copyKind", "srcKind", "dstKind", "memKind") if c in columns]
    name_column = next((c for c in KERNEL_NAME_COLUMNS if c in columns), None)
    if table == KERNEL_TABLE:
        if name_column is None:
            raise TracekitError(f"{table} has no kernel name column", path)
        extra.append(name_column)
    extra += [c for c in ("srcDeviceId", "dstDeviceId") if c in columns and table == MEMCPY_TABLE]
    select = ", ".join(f'"{c}"' for c in extra)
    frame = _query(
        db,
        f'SELECT "start" AS start_ns, "end" AS end_ns, deviceId AS device, streamId AS stream, '
        f"correlationId AS correlation, {_process_column(columns, table, path)} AS process"
        f'{", " + select if select else ""} FROM "{table}"',
        raw=True,
    )
    if table == KERNEL_TABLE:
        name = _text(frame[name_column], strings)  # type: ignore[index]
        if (name == "").any():
            raise TracekitError(
                f"{int((name == '').sum())} kernels have a name id missing from {STRINGS_TABLE}",
                path,
            )
    elif table == MEMCPY_TABLE:
        name = _copy_names(frame)
    else:
        memory = _kind_labels(frame.get("memKind"), _MEMORY_KINDS)
        name = "Memset (" + memory + ")"
    if table == MEMCPY_TABLE and {"srcDeviceId", "dstDeviceId"} <= set(frame.columns):
        src, _ = _integers(frame["srcDeviceId"])
        dst, _ = _integers(frame["dstDeviceId"])
        peer = (src >= 0) & (dst >= 0) & (src != dst)  # a copy between two GPUs
        name = name.where(~peer, "Memcpy PtoP (Device -> Device)")
    ints = {}
    valid = np.ones(len(frame), dtype=bool)
    for column in ("start_ns", "end_ns", "device", "stream", "correlation", "process"):
        ints[column], ok = _integers(frame[column])
        if column in ("start_ns", "end_ns", "device", "process"):  # rows unusable without
            valid = valid & ok
    out = pd.DataFrame(ints, index=frame.index)
    dropped = int((~valid).sum())
    if (out["end_ns"] < out["start_ns"])[valid].any():
        raise TracekitError(f"{table} has rows that end before they start", path)
    nbytes = frame["bytes"] if "bytes" in frame else pd.Series(UNKNOWN, index=frame.index)
    out = out.assign(
        table=table,
        name=name.to_numpy(dtype=object),
        bytes=_integers(nbytes)[0],
    )
    return out.loc[valid], dropped


def _integers(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """int64 values of an integer column (SQLite's dynamic types: text, reals and NULL where
    integers belong are UNKNOWN) and where they were real integers."""
    if values.dtype.kind in "iu":
        return values.to_numpy(np.int64), np.ones(len(values), dtype=bool)
    raw = values.to_numpy(dtype=object)
    limit = np.iinfo(np.int64).max
    ok = np.fromiter(
        (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and abs(v) <= limit
         for v in raw), bool, len(raw),
    )  # fmt: skip
    out = np.full(len(raw), UNKNOWN, dtype=np.int64)
    out[ok] = raw[ok].astype(np.int64)
    return out, ok


def _kind_labels(codes: pd.Series | None, labels: dict[int, str]) -> pd.Series:
    if codes is None:
        return pd.Series(dtype=object)
    return pd.to_numeric(codes, errors="coerce").map(labels).fillna("Unknown").astype(object)


def _copy_names(frame: pd.DataFrame) -> pd.Series:
    """Kineto's copy names: 'Memcpy HtoD (Pageable -> Device)'."""
    if "copyKind" not in frame:
        return pd.Series("Memcpy", index=frame.index, dtype=object)
    kind = _kind_labels(frame["copyKind"], _COPY_KINDS)
    name = "Memcpy " + kind
    if {"srcKind", "dstKind"} <= set(frame.columns):
        src = _kind_labels(frame["srcKind"], _MEMORY_KINDS)
        dst = _kind_labels(frame["dstKind"], _MEMORY_KINDS)
        name = name + " (" + src + " -> " + dst + ")"
    return name


def _runtime(db: sqlite3.Connection, tables: dict[str, set[str]], path: Path) -> pd.Series:
    """Earliest start of the runtime calls per (process, correlation id)."""
    empty = pd.Series(
        dtype=np.int64,
        index=pd.MultiIndex.from_arrays([[], []], names=["process", "correlation"]),
        name="launch_ns",
    )
    if RUNTIME_TABLE not in tables:
        return empty
    columns = tables[RUNTIME_TABLE]
    _require(columns, ("start", "correlationId"), RUNTIME_TABLE, path)
    frame = _query(
        db,
        f"SELECT {_process_column(columns, RUNTIME_TABLE, path)} AS process, "
        'correlationId AS correlation, MIN("start") AS launch_ns '
        f'FROM "{RUNTIME_TABLE}" WHERE correlationId IS NOT NULL GROUP BY 1, 2',
        raw=True,
    )
    keep = np.ones(len(frame), dtype=bool)
    for column in ("process", "correlation", "launch_ns"):
        frame[column], ok = _integers(frame[column])
        keep = keep & ok
    frame = frame.loc[keep]
    if frame.empty:
        return empty
    return frame.groupby(["process", "correlation"])["launch_ns"].min().astype(np.int64)


def _nvtx(
    db: sqlite3.Connection, tables: dict[str, set[str]], strings: pd.Series, path: Path
) -> pd.DataFrame:
    """NVTX ranges (not marks) with their text: process, name, start_ns, end_ns."""
    none = pd.DataFrame(
        {
            "process": pd.Series(dtype=np.int64),
            "name": pd.Series(dtype=object),
            "start_ns": pd.Series(dtype=np.int64),
            "end_ns": pd.Series(dtype=np.int64),
        }
    )
    if NVTX_TABLE not in tables:
        return none
    columns = tables[NVTX_TABLE]
    _require(columns, ("start", "end"), NVTX_TABLE, path)
    text = [c for c in ("text", "textId") if c in columns]
    if not text:
        raise TracekitError(f"{NVTX_TABLE} has neither a text nor a textId column", path)
    where = 'WHERE "end" IS NOT NULL AND "end" >= "start"'
    if "eventType" in columns:
        where += f" AND eventType IN {NVTX_RANGE_TYPES}"
    frame = _query(
        db,
        f"SELECT {_process_column(columns, NVTX_TABLE, path)} AS process, "
        f'"start" AS start_ns, "end" AS end_ns, {", ".join(text)} '
        f'FROM "{NVTX_TABLE}" {where}',
        raw=True,
    )
    name = pd.Series("", index=frame.index, dtype=object)
    for column in reversed(text):  # inline text wins over a text id
        found = _text(frame[column], strings)
        name = found.where(found != "", name)
    keep = (name != "").to_numpy()
    for column in ("process", "start_ns", "end_ns"):
        frame[column], ok = _integers(frame[column])
        keep = keep & ok
    frame = frame.assign(name=name).loc[keep]
    frame = frame[frame["end_ns"] >= frame["start_ns"]]
    return frame[["process", "name", "start_ns", "end_ns"]].astype(
        {"process": np.int64, "start_ns": np.int64, "end_ns": np.int64}
    )


def _processes(db: sqlite3.Connection, tables: dict[str, set[str]]) -> dict[int, str]:
    if not {"globalPid", "name"} <= tables.get("PROCESSES", set()):
        return {}
    frame = _query(
        db,
        f"SELECT globalPid >> {PROCESS_SHIFT} AS process, name FROM PROCESSES "
        "WHERE typeof(globalPid) = 'integer'",
    )
    return {int(p): str(n) for p, n in zip(frame["process"], frame["name"], strict=True)}


def _devices(
    db: sqlite3.Connection, tables: dict[str, set[str]], strings: pd.Series
) -> dict[int, str]:
    """GPU names by CUDA device id, from TARGET_INFO_CUDA_DEVICE or TARGET_INFO_GPU."""
    for table, id_column in (("TARGET_INFO_CUDA_DEVICE", "cudaId"), ("TARGET_INFO_GPU", "id")):
        if {id_column, "name"} <= tables.get(table, set()):
            frame = _query(
                db,
                f'SELECT {id_column} AS id, name FROM "{table}" '
                f"WHERE typeof({id_column}) = 'integer'",
            )
            names = _text(frame["name"], strings)
            return {int(i): str(n) for i, n in zip(frame["id"], names, strict=True)}
    return {}


def _version(db: sqlite3.Connection, tables: dict[str, set[str]]) -> str | None:
    if not {"name", "value"} <= tables.get("META_DATA_EXPORT", set()):
        return None
    row = db.execute(
        "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_PRODUCT_VERSION'"
    ).fetchone()
    return str(row[0]) if row else None


# --- .nsys-rep -----------------------------------------------------------------------------


def sqlite_for(path: Path) -> Path:
    """The SQLite export to read for ``path``: itself, or the export of a ``.nsys-rep`` report.

    A report's export is cached beside it as ``<name>.sqlite``: reused when it is at least as
    new as the report, written (atomically) with ``nsys export`` when absent, and never
    overwritten when it exists but is older (it may be the user's own file).
    """
    if not path.name.endswith(".nsys-rep"):
        return path
    if not path.is_file():
        raise TracekitError("no such file", path)
    export = path.with_suffix(".sqlite")
    if export.exists():
        if export.stat().st_mtime >= path.stat().st_mtime:
            return export
        raise TracekitError(
            f"{export.name} beside it is older than the report and tracekit does not overwrite "
            f"it; delete it or run: nsys export --type sqlite --force-overwrite true {path}",
            path,
        )
    nsys = shutil.which("nsys")
    if nsys is None:
        raise TracekitError(
            "nsys is not on PATH, so the report cannot be read; install Nsight Systems or "
            f"export it elsewhere (nsys export --type sqlite {path.name}) and pass the .sqlite",
            path,
        )
    _export(nsys, path, export)
    return export


EXPORT_TIMEOUT_ENV = "TRACEKIT_NSYS_EXPORT_TIMEOUT"
EXPORT_TIMEOUT_S = 600.0  # a large report exports in a few minutes


def _export_timeout() -> float:
    """Seconds ``nsys export`` may run: EXPORT_TIMEOUT_ENV when it is a positive number."""
    try:
        value = float(os.environ.get(EXPORT_TIMEOUT_ENV, EXPORT_TIMEOUT_S))
    except ValueError:
        return EXPORT_TIMEOUT_S
    return value if 0 < value < float("inf") else EXPORT_TIMEOUT_S


def _export_problem(path: Path) -> str:
    """Why a fresh export cannot be kept ('' when it is an SQLite database with nsys tables)."""
    try:
        _precheck(path)
        with _database(path) as db:
            tables = set(_tables(db, path))
    except TracekitError as e:
        return e.problem
    if not tables & {KERNEL_TABLE, STRINGS_TABLE, "TARGET_INFO_SESSION_START_TIME"}:
        return "no Nsight Systems tables in it"
    return ""


def _export(nsys: str, report: Path, export: Path) -> None:
    """Run ``nsys export`` into a temporary file beside the report, then move it in place."""
    tmp = export.with_name(f".{export.stem}.tracekit-{os.getpid()}.sqlite")
    command = [nsys, "export", "--type", "sqlite", "--output", str(tmp), str(report)]
    timeout = _export_timeout()
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        tmp.unlink(missing_ok=True)
        raise TracekitError(
            f"nsys export did not finish within {timeout:g} s (set {EXPORT_TIMEOUT_ENV} to wait "
            "longer)",
            report,
        ) from None
    except OSError as e:
        raise TracekitError(f"could not run nsys ({e})", report) from None
    try:
        if done.returncode != 0 or not tmp.is_file():
            said = (done.stderr or done.stdout).strip().splitlines()
            why = said[-1] if said else f"exit status {done.returncode}"
            raise TracekitError(f"nsys export failed: {why}", report)
        problem = _export_problem(tmp)
        if problem:  # never cache garbage: it would be reused on every later run
            raise TracekitError(f"nsys export produced an unusable file ({problem})", report)
        if export.exists():  # written meanwhile by someone else: keep theirs
            return
        os.replace(tmp, export)
    except OSError as e:
        raise TracekitError(f"could not write the export beside the report ({e})", report) from None
    finally:
        tmp.unlink(missing_ok=True)
