"""Chrome traces (torch.profiler / Kineto JSON, optionally gzipped) -> RankTrace.

Events are parsed by HolisticTraceAnalysis' parser with its nanosecond rounding switched off,
decoded once, and turned into the kernel and range tables of ``tracekit.schema``.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import re
import warnings
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracekit import intervals as iv
from tracekit.classify import gpu_kinds, matches
from tracekit.config import AnalysisConfig
from tracekit.errors import TracekitError
from tracekit.load import comm_args, decode
from tracekit.load.kernels import gpu_kernel_table
from tracekit.load.ranges import assign, host_ranges, project_onto_gpu
from tracekit.schema import (
    COMM,
    COMPUTE,
    CPU_DEVICE,
    KERNEL_COLUMNS,
    KIND_DTYPE,
    MEMORY,
    OTHER,
    RANGE_COLUMNS,
    RANGE_PHASE,
    UNKNOWN,
    RankTrace,
    conform,
    empty,
)

# The event arguments tracekit reads (HTA's names for them, and the typed decoder's).
ARG_NAMES = tuple(name for name, _ in decode.ARG_COLUMNS)
# HTA's argument names where they differ from ours (see hta.configs.parser_config).
_HTA_ARG = {
    "pg_name": "process_group_name",
    "pg_desc": "process_group_desc",
    "pg_ranks": "process_group_ranks",
}
PARSERS = ("fast", "hta")
GPU_RANGE_CAT = "gpu_user_annotation"
HOST_RANGE_CATS = ("user_annotation", "cpu_op")
COMM_RECORD = "record_param_comms"  # host op that carries a collective's arguments
# Top-level key of a multi-rank file written by tracekit (see tracekit.export.perfetto).
MERGED_KEY = "tracekitRanks"
NOTES_KEY = " tracekit notes"  # read_events' notes in ``meta`` (no trace uses this key)
MAX_RANK = 2**31 - 1  # torch keeps ranks in int32
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def read_events(path: Path, parser: str = "fast") -> tuple[dict[str, Any], pd.DataFrame]:
    """A Chrome trace's metadata and its timed events as one frame (``cat``, ``name``,
    ``pid``, ``tid``, ``start_ns``, ``end_ns`` and the ARG_NAMES columns); host and device
    events alike. ``parser``: "fast" (tracekit.load.decode) or "hta" (HTA's parser); both give
    the same frame. ``meta[NOTES_KEY]`` lists events dropped or repaired. Raise TracekitError
    naming the file when it is unusable."""
    if parser not in PARSERS:
        raise ValueError(f"unknown parser {parser!r}; expected one of {PARSERS}")
    _precheck(path)
    if parser == "hta":
        meta, columns, notes = _hta_columns(path)
    else:
        meta, columns, notes = decode.decode(path)
    events, more = _frame(columns, notes, path)
    return {**meta, NOTES_KEY: notes + more}, events


def load_chrome(path: Path, config: AnalysisConfig, *, default_rank: int = 0) -> list[RankTrace]:
    """Read a Chrome trace: one rank, or every rank of a file tracekit merged (MERGED_KEY).
    A trace with no rank (in distributedInfo or the file name) is ``default_rank``, with a note.
    Raise TracekitError naming the file when it is unusable."""
    meta, events = read_events(path, config.parser)
    notes = list(meta.get(NOTES_KEY, ()))
    merged = meta.get(MERGED_KEY)
    if merged is None:
        info = _dict(meta.get("distributedInfo"))
        if meta.get("distributedInfo") is not None and not info:
            notes.append("distributedInfo is not an object; ignored")
        world_size = _int_or_none(info.get("world_size"))
        if world_size is not None and not 0 < world_size <= MAX_RANK + 1:
            notes.append(f"distributedInfo.world_size {_short(world_size)} is not usable; ignored")
            world_size = None
        rank, how = _rank(meta, path, default_rank)
        if how:
            notes.append(how)
        rank_meta = {
            "world_size": world_size,
            "backend": _str_or_none(info.get("backend")),
            "nccl_version": _str_or_none(info.get("nccl_version")),
            "devices": [
                d.get("name") for d in _list(meta.get("deviceProperties")) if isinstance(d, dict)
            ],
            "pg_config": _pg_config(info.get("pg_config")),
            "notes": notes,
        }
        return [_rank_trace(events, rank, rank_meta, path, config)]
    return [
        _rank_trace(rank_events, rank, rank_meta | {"notes": list(notes)}, path, config)
        for rank, rank_meta, rank_events in _split_merged(merged, events, path)
    ]


def _rank_trace(
    events: pd.DataFrame, rank: int, meta: dict[str, Any], path: Path, config: AnalysisConfig
) -> RankTrace:
    notes: list[str] = meta["notes"]
    # Masks from numpy arrays, and takes of the columns read only: pandas string comparisons
    # and whole-frame takes were most of this function's time on large traces.
    cat = events["cat"].to_numpy()
    gpu = (events["stream"].to_numpy() >= 0) & (cat != GPU_RANGE_CAT)
    timed = np.isin(cat, HOST_RANGE_CATS)
    ranges = host_ranges(events.loc[~gpu & timed, list(_RANGE_COLUMNS)], rank, config, notes)
    if gpu.any():
        host = events.loc[~gpu, list(_LAUNCH_COLUMNS)]
        records = events.loc[~gpu & (events["name"].to_numpy() == COMM_RECORD)]
        kernels = _gpu_kernels(events.loc[gpu], host, records, ranges, rank, meta, config, notes)
        ranges, phase_source = _with_gpu_phases(events, timed, ranges, kernels, rank, config)
        platform = "gpu"
    else:
        kernels = _cpu_kernels(events.loc[~gpu], ranges, rank, meta, config)
        platform, phase_source = "cpu", "host"
    return RankTrace(
        rank=rank,
        source=path,
        kernels=kernels,
        ranges=ranges,
        platform=platform,
        world_size=meta.get("world_size"),
        meta={k: v for k, v in meta.items() if k not in ("world_size", "pg_config")}
        | {"phase_source": phase_source},
    )


def _split_merged(
    merged: object, events: pd.DataFrame, path: Path
) -> Iterator[tuple[int, dict[str, Any], pd.DataFrame]]:
    """Each rank's events of a merged file, with GPU pids turned back into device indices.

    ``merged`` is ``{"ranks": [{"rank", "world_size", "pids": {pid: device or -1}}, ...]}``.
    """
    try:
        entries = [
            (int(e["rank"]), e.get("world_size"), {int(p): int(d) for p, d in e["pids"].items()})
            for e in merged["ranks"]  # type: ignore[index]
        ]
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        raise TracekitError(f"malformed {MERGED_KEY} header", path) from None
    if any(not 0 <= rank <= MAX_RANK for rank, _, _ in entries):
        raise TracekitError(f"malformed {MERGED_KEY} header (a rank out of range)", path)
    pid = events["pid"].to_numpy()
    for rank, world_size, pids in entries:
        mine = np.isin(pid, list(pids))
        device = pd.Series(pids).reindex(pid[mine]).to_numpy(np.int64)
        sub = events.loc[mine]
        sub = sub.assign(pid=np.where(device >= 0, device, sub["pid"].to_numpy()))
        yield rank, {"world_size": _int_or_none(world_size)}, sub


# --- reading -------------------------------------------------------------------------------


def _precheck(path: Path) -> None:
    """Cheap checks that give clear messages before the full parse."""
    if not path.is_file():
        raise TracekitError("no such file", path)
    if path.stat().st_size == 0:
        raise TracekitError("empty file", path)
    with path.open("rb") as fh:
        magic = fh.read(2)
    gz = path.name.endswith(".gz")
    if gz and magic != b"\x1f\x8b":
        raise TracekitError("named .gz but not gzip-compressed", path)
    try:
        opener = gzip.open if gz else open
        with opener(path, "rb") as fh:
            head = fh.read(4096)
    except (OSError, EOFError, zlib.error) as e:
        raise TracekitError(f"truncated or corrupt gzip ({e})", path) from None
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text:
        raise TracekitError("no JSON in the file (only whitespace)", path)
    if text[:1] == b"[":
        raise TracekitError("JSON array at top level; expected an object with traceEvents", path)
    if text[:1] != b"{":
        raise TracekitError("not JSON (expected a Chrome trace object)", path)


@contextmanager
def _hta_quiet_full_precision() -> Iterator[None]:
    """Keep HTA from rounding ns timestamps to whole µs and from logging per file."""
    from hta.configs.env_options import HTAEnvOptions

    options = HTAEnvOptions.instance()
    rounding_off = options.disable_ns_rounding()
    hta_log = logging.getLogger("hta")
    level = hta_log.level
    options.set_disable_ns_rounding(True)
    hta_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # HTA's pandas deprecations are not the user's
            yield
    finally:
        options.set_disable_ns_rounding(rounding_off)
        hta_log.setLevel(level)


def _parser_config() -> Any:
    from hta.configs.parser_config import ParserConfig

    known = {a.name: a for a in ParserConfig.get_all_available_args().values()}
    return ParserConfig(args=[known[_HTA_ARG.get(name, name)] for name in ARG_NAMES])


def _hta_columns(path: Path) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """HTA-parse the file (the reference parser): metadata, the decoder's columns, notes."""
    from hta.common.trace_parser import parse_trace_dataframe

    try:
        with _hta_quiet_full_precision():
            meta, df, symbols = parse_trace_dataframe(str(path), _parser_config())
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise TracekitError(f"truncated or corrupt gzip ({e})", path) from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise decode.json_error(e, path) from None
    except (KeyError, ValueError, TypeError, AttributeError, IndexError):
        raise TracekitError(_diagnose(path), path) from None
    if df.empty or not {"ts", "dur", "name", "cat"} <= set(df.columns):
        raise TracekitError(_diagnose(path), path)
    table = np.asarray(symbols.get_sym_table(), dtype=object)
    raw = {
        "cat": table[df["cat"].to_numpy()].tolist(),
        "name": table[df["name"].to_numpy()].tolist(),
        **{c: df[c].tolist() for c in ("pid", "tid", "ts", "dur")},
        **{a: df[_HTA_ARG.get(a, a)].tolist() for a in ARG_NAMES},
    }
    columns, notes = decode.keep_usable(raw)
    return meta, columns, notes


def _frame(columns: dict[str, Any], notes: list[str], path: Path) -> tuple[pd.DataFrame, list[str]]:
    """The events frame from the decoder's columns; notes on argument values replaced."""
    name = columns["name"]
    if len(name) == 0:
        problem = _diagnose(path)
        if problem == _SHAPE_UNKNOWN and notes:
            problem = "no usable events (" + "; ".join(notes) + ")"
        raise TracekitError(problem, path)
    typed = isinstance(name, np.ndarray)  # the typed decode's arrays: final already
    bad_name = 0 if typed else sum(not isinstance(n, str) for n in name)
    if bad_name:
        raise TracekitError(f"{bad_name} events lack a name", path)
    start = _ns(decode.time_column(columns["ts"]))
    dur = _ns(decode.time_column(columns["dur"]))
    if (dur < 0).any():
        first = int(np.argmax(dur < 0))
        raise TracekitError(
            f"{int((dur < 0).sum())} events have negative durations "
            f"(first: {name[first]!r}, dur={columns['dur'][first]} µs)",
            path,
        )
    more: list[str] = []
    if typed:
        base = {k: columns[k] for k in ("cat", "name", "pid", "tid")}
        args = {arg: columns[arg] for arg in ARG_NAMES}
    else:
        base = {
            "cat": decode.object_column(columns["cat"]),
            "name": decode.object_column(name),
            "pid": decode.id_column(columns["pid"]),
            "tid": decode.id_column(columns["tid"]),
        }
        args = _checked_args(columns, more)
    events = pd.DataFrame(base | {"start_ns": start, "end_ns": start + dur} | args, copy=False)
    return events, more


def _checked_args(columns: dict[str, list[Any]], notes: list[str]) -> dict[str, np.ndarray]:
    """Argument arrays from plain values: odd ones replaced by the default, with a note."""
    args: dict[str, np.ndarray] = {}
    for arg, kind in decode.ARG_COLUMNS:
        values = columns[arg]
        if arg == "stream":
            args[arg] = decode.id_column(values)
        elif kind == "int":
            args[arg], bad = decode.int_column(values, decode.ARG_DEFAULTS[arg])
            if bad:
                notes.append(f"{bad} events have a {arg} that is not an integer; ignored")
        elif kind == "str":
            args[arg] = decode.str_column(values)
        else:
            args[arg] = decode.object_column(values)
    return args


_SHAPE_UNKNOWN = "events of an unexpected shape (could not build a table from them)"


def _diagnose(path: Path) -> str:
    """Say why a file that parsed as JSON has nothing tracekit can use (error path only)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as fh:
            doc = json.loads(fh.read())
    except (OSError, EOFError, zlib.error, ValueError) as e:
        return f"unreadable trace ({type(e).__name__}: {e})"
    except RecursionError:
        return "JSON nested too deeply to read"
    if not isinstance(doc, dict):
        return f"top-level JSON is a {type(doc).__name__}; expected an object with traceEvents"
    if "traceEvents" not in doc:
        return "no traceEvents: not a Chrome trace"
    events = doc["traceEvents"]
    if not isinstance(events, list):
        return f"traceEvents is a {type(events).__name__}; expected a list"
    if not events:
        return "traceEvents is empty"
    if not all(isinstance(e, dict) for e in events):
        return "traceEvents holds non-object entries"
    timed = [e for e in events if e.get("ph") == "X"]
    if not timed:
        return "no complete ('X') events, only metadata or instants"
    for field in ("ts", "dur", "name", "cat"):
        lacking = sum(1 for e in timed if field not in e)
        if lacking:
            return f"{lacking} complete events lack the {field!r} field"
    return _SHAPE_UNKNOWN


def _ns(values: np.ndarray) -> np.ndarray:
    """Microseconds (int or float) -> integer nanoseconds, keeping the fraction."""
    v = np.asarray(values)
    if v.dtype.kind in "iu":
        return v.astype(np.int64) * 1000
    v = v.astype(np.float64)
    whole = np.floor(v)
    return whole.astype(np.int64) * 1000 + np.rint((v - whole) * 1000).astype(np.int64)


def _rank(meta: dict[str, Any], path: Path, default: int) -> tuple[int, str]:
    """The trace's rank and, when it was not recorded in the trace, a note saying how it was
    numbered: distributedInfo.rank, else a number in the file name, else ``default``."""
    recorded = _dict(meta.get("distributedInfo")).get("rank")
    rank = _int_or_none(recorded)
    if rank is not None and 0 <= rank <= MAX_RANK:
        return rank, ""
    if recorded is not None:
        raise TracekitError(f"distributedInfo.rank {_short(recorded)} is not a usable rank", path)
    found = _RANK_IN_NAME.search(path.name)
    if found and int(found.group(1)) <= MAX_RANK:
        return int(found.group(1)), ""  # the README's rule: no note
    return default, (
        f"no distributedInfo.rank and no rank in the file name: numbered {default} by its place "
        "among its group's trace files in natural name order"
    )


def _int_or_none(value: object) -> int | None:
    """An integer (or integral float, or decimal string) as int; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _pg_config(value: object) -> dict[str, tuple[int, str]]:
    """Process group name -> (size, description), from distributedInfo.pg_config (recent
    Kineto); size -1 when not usable."""
    groups = {}
    for entry in _list(value):
        entry = _dict(entry)
        name, size = entry.get("pg_name"), _int_or_none(entry.get("pg_size"))
        if isinstance(name, str):
            usable = size is not None and 0 < size <= MAX_RANK + 1
            groups[name] = (size if usable else -1, _str_or_none(entry.get("pg_desc")) or "")
    return groups


# --- GPU traces ----------------------------------------------------------------------------


_RANGE_COLUMNS = ("name", "start_ns", "end_ns")  # what host_ranges reads
_LAUNCH_COLUMNS = ("name", "start_ns", "end_ns", "correlation")  # host columns GPU traces read


def _gpu_kernels(
    gpu: pd.DataFrame,
    host: pd.DataFrame,
    records: pd.DataFrame,
    ranges: pd.DataFrame,
    rank: int,
    meta: dict[str, Any],
    config: AnalysisConfig,
    notes: list[str],
) -> pd.DataFrame:
    """Kernels, copies and syncs, each with the time and step of the call that launched it.
    ``host``: the host events (_LAUNCH_COLUMNS); ``records``: the COMM_RECORD ones."""
    same = gpu.duplicated(["pid", "stream", "start_ns", "end_ns"]).to_numpy()
    if same.any():  # one stream runs one kernel at a time: a repeated row is a copy
        notes.append(
            f"{int(same.sum())} GPU events repeat another on the same stream at the same time "
            "(duplicated events or correlation ids): counted once"
        )
        gpu = gpu.loc[~same]
    launches = host.loc[host["correlation"] >= 0]
    launch_at = launches.groupby("correlation")["start_ns"].min()
    correlation = gpu["correlation"].to_numpy(np.int64)
    launch = launch_at.reindex(correlation).fillna(UNKNOWN).to_numpy(np.int64)
    codes, names = pd.factorize(gpu["name"])  # classify each distinct name once
    kind = gpu_kinds(pd.Series(names), config.classification)[codes]
    unlaunched = launch < 0
    if unlaunched.any():
        comm = int((unlaunched & np.asarray(kind == COMM)).sum())
        notes.append(
            f"{int(unlaunched.sum())} GPU events ({comm} communication) have no launch in the "
            "trace (no CPU call with their correlation id): classified by name and placed in "
            "steps by their start time; the headline window, like HTA's, leaves them out"
        )
    steps = ranges[ranges["kind"] == "step"]
    args = _collective_args(gpu, kind, launch, host, records, meta.get("pg_config") or {})
    return gpu_kernel_table(
        rank,
        gpu.rename(columns={"pid": "device"}),
        kind=kind,
        launch=launch,
        steps=steps,
        **args,
    )


_NCCL_MARK = "nccl:"
# Communication arguments: the kernel's own (recent PyTorch), else its record_param_comms op's.
_COMM_ARGS = ("collective_name", "in_msg_nelems", "out_msg_nelems", "msg_dtype", "pg_name",
              "pg_desc", "pg_ranks", "group_size")  # fmt: skip


def _collective_args(
    gpu: pd.DataFrame,
    kind: pd.Categorical,
    launch: np.ndarray,
    host: pd.DataFrame,
    records: pd.DataFrame,
    groups: comm_args.Groups,
) -> dict[str, np.ndarray]:
    """Collective name, message bytes, dtype and process group of comm kernels; bytes of
    copies for memory rows.

    Arguments come from the kernel itself (recent PyTorch), else from the record_param_comms
    host op whose span holds the launch, else the name comes from the kernel name alone.
    """
    n = len(gpu)
    is_comm = np.asarray(kind == COMM)
    out = {
        "collective": np.full(n, "", dtype=object),
        "nbytes": np.where(np.asarray(kind == MEMORY), gpu["bytes"].to_numpy(np.int64), UNKNOWN),
        "dtype": np.full(n, "", dtype=object),
        "pg": np.full(n, "", dtype=object),
        "pg_size": np.full(n, UNKNOWN, dtype=np.int64),
    }
    if not is_comm.any():
        return out
    rows = np.flatnonzero(is_comm)
    comm = gpu.iloc[rows]
    found = comm_args.describe(comm[list(_COMM_ARGS)], groups)
    missing = (found["collective"] == "") & (found["pg"] == "")
    need = missing & (launch[rows] >= 0)
    if need.any():
        described = (records["collective_name"] != "") | (records["pg_name"] != "")
        records = records.loc[described.to_numpy()].sort_values("start_ns", kind="stable")
    if need.any() and len(records):
        at = np.searchsorted(records["start_ns"].to_numpy(), launch[rows], side="right") - 1
        safe = np.clip(at, 0, None)
        inside = need & (at >= 0) & (launch[rows] < records["end_ns"].to_numpy()[safe])
        described = comm_args.describe(records[list(_COMM_ARGS)], groups)
        for column in found:
            found[column] = np.where(inside, described[column][safe], found[column])
    # Older PyTorch: the 'nccl:all_to_all' range around the launch names the collective.
    need = (found["collective"] == "") & (launch[rows] >= 0)
    marks = host.loc[matches(host["name"], ["^" + re.escape(_NCCL_MARK)])] if need.any() else host
    if need.any() and len(marks):
        marks = marks.sort_values("start_ns", kind="stable")
        at = np.searchsorted(marks["start_ns"].to_numpy(), launch[rows], side="right") - 1
        safe = np.clip(at, 0, None)
        inside = need & (at >= 0) & (launch[rows] < marks["end_ns"].to_numpy()[safe])
        named = marks["name"].str.removeprefix(_NCCL_MARK).map(comm_args.normalize).to_numpy()
        found["collective"] = np.where(inside, named[safe], found["collective"])
    by_name = comm_args.from_kernel_name(comm["name"]).to_numpy(dtype=object)
    found["collective"] = np.where(found["collective"] == "", by_name, found["collective"])
    comm_args.fill_single_group(found, groups)
    for column, values in found.items():
        key = "nbytes" if column == "bytes" else column
        out[key][rows] = values
    return out


def _with_gpu_phases(
    events: pd.DataFrame,
    timed: np.ndarray,
    ranges: pd.DataFrame,
    kernels: pd.DataFrame,
    rank: int,
    config: AnalysisConfig,
) -> tuple[pd.DataFrame, str]:
    """Add GPU-side phase ranges (see ``AnalysisConfig.gpu_phases``); say which were used.
    ``timed``: which events have a HOST_RANGE_CATS category."""
    host_phases = ranges[ranges["kind"] == RANGE_PHASE]
    annotation = config.gpu_phases == "annotation"
    gpu_marks = events.loc[events["cat"].to_numpy() == GPU_RANGE_CAT] if annotation else events[:0]
    gpu_marks = gpu_marks.loc[matches(gpu_marks["name"], [config.phase_pattern])]
    if annotation and len(gpu_marks):
        host_marks = events.loc[timed]
        step_of = pd.Series(
            assign(host_marks["start_ns"].to_numpy(), ranges[ranges["kind"] == "step"]),
            index=host_marks["external_id"].to_numpy(),
        )
        step_of = step_of[~step_of.index.duplicated()]
        projected = pd.DataFrame(
            {
                "rank": rank,
                "kind": RANGE_PHASE,
                "name": gpu_marks["name"].to_numpy(),
                "step": step_of.reindex(gpu_marks["external_id"].to_numpy()).fillna(-1),
                "device": gpu_marks["pid"].to_numpy(),
                "start_ns": gpu_marks["start_ns"].to_numpy(),
                "end_ns": gpu_marks["end_ns"].to_numpy(),
            }
        )
        projected, source = conform(projected, RANGE_COLUMNS), "gpu_user_annotation"
    else:
        projected, source = project_onto_gpu(host_phases, kernels), "projected"
    if len(projected) == 0:
        return ranges, "none"
    return conform(pd.concat([ranges, projected], ignore_index=True), RANGE_COLUMNS), source


# --- CPU traces (gloo) ---------------------------------------------------------------------


def _cpu_kernels(
    host: pd.DataFrame,
    ranges: pd.DataFrame,
    rank: int,
    meta: dict[str, Any],
    config: AnalysisConfig,
) -> pd.DataFrame:
    """Host activity as a kernel table: gloo spans on its worker threads are communication;
    the operators on the training threads are compute, minus time inside collective calls."""
    rules = config.classification
    timed = host.loc[host["cat"].isin(HOST_RANGE_CATS)]
    is_comm = matches(timed["name"], rules.cpu_comm)
    only_comm = pd.Series(is_comm).groupby(timed["tid"].to_numpy()).all()
    worker = timed["tid"].isin(only_comm.index[only_comm.to_numpy()]).to_numpy()
    comm = timed.loc[worker & is_comm]
    ops = timed.loc[~worker & (timed["cat"] == "cpu_op").to_numpy()]
    calls = matches(ops["name"], rules.cpu_collective_call)
    tids = ops["tid"].to_numpy()
    pieces = [_carve(ops.loc[tids == tid], calls[tids == tid]) for tid in np.unique(tids)]
    steps = ranges[ranges["kind"] == "step"]
    collective = comm["name"].str.split(":", n=1).str[-1].map(comm_args.normalize).to_numpy()
    group = _cpu_groups(comm["start_ns"].to_numpy(), collective, host, meta)
    own_dtype = [t[0] if isinstance(t, list) and t else "" for t in comm["input_type"]]
    group["dtype"] = np.where(
        group["dtype"] == "", [comm_args.dtype_name(d) for d in own_dtype], group["dtype"]
    ).astype(object)
    comm_rows = pd.DataFrame(
        {
            "stream": comm["tid"].to_numpy(),
            "name": comm["name"].to_numpy(),
            "kind": COMM,
            "start_ns": comm["start_ns"].to_numpy(),
            "end_ns": comm["end_ns"].to_numpy(),
            "collective": collective,
            "bytes": comm_args.shape_bytes(comm["input_dims"], comm["input_type"]),
            **group,
        }
    )
    pieces = [p.assign(dtype="", pg="", pg_size=UNKNOWN) for p in pieces if len(p)]
    rows = pd.concat([comm_rows, *pieces], ignore_index=True)
    rows = rows.assign(
        rank=rank,
        device=CPU_DEVICE,
        launch_ns=rows["start_ns"],
        step=assign(rows["start_ns"].to_numpy(), steps),
        correlation=UNKNOWN,
        kind=pd.Categorical(rows["kind"], dtype=KIND_DTYPE),
    )
    if len(rows) == 0:
        return empty(KERNEL_COLUMNS)
    return conform(rows.sort_values("start_ns", kind="stable"), KERNEL_COLUMNS)


def _cpu_groups(
    start: np.ndarray, collective: np.ndarray, host: pd.DataFrame, meta: dict[str, Any]
) -> dict[str, np.ndarray]:
    """dtype, process group and its size of gloo spans: from the latest record_param_comms
    of the same collective that began before the span (gloo runs the work it queued)."""
    n = len(start)
    out = {
        "dtype": np.full(n, "", dtype=object),
        "pg": np.full(n, "", dtype=object),
        "pg_size": np.full(n, UNKNOWN, dtype=np.int64),
    }
    groups = meta.get("pg_config") or {}
    records = host.loc[(host["name"] == COMM_RECORD).to_numpy()].sort_values("start_ns")
    if n == 0 or len(records) == 0:
        comm_args.fill_single_group(out, groups)
        return out
    described = comm_args.describe(records[list(_COMM_ARGS)], groups)
    record_start = records["start_ns"].to_numpy()
    for name in np.unique(collective):
        mine = np.flatnonzero(described["collective"] == name)
        spans = np.flatnonzero(collective == name)
        if len(mine) == 0:
            continue
        at = np.searchsorted(record_start[mine], start[spans], side="right") - 1
        found = at >= 0
        for column in out:
            out[column][spans[found]] = described[column][mine[at[found]]]
    comm_args.fill_single_group(out, groups)
    return out


def _carve(ops: pd.DataFrame, is_call: np.ndarray) -> pd.DataFrame:
    """One thread's top-level operators, split around the collective calls nested in them."""
    if len(ops) == 0:
        return pd.DataFrame()
    order = np.lexsort((-ops["end_ns"].to_numpy(), ops["start_ns"].to_numpy()))
    start = ops["start_ns"].to_numpy()[order]
    end = ops["end_ns"].to_numpy()[order]
    names = ops["name"].to_numpy()[order]
    call = is_call[order]
    reach = np.maximum.accumulate(end)
    top = np.ones(len(start), dtype=bool)
    top[1:] = start[1:] >= reach[:-1]
    calls = iv.union(start[call], end[call])
    busy = iv.subtract((start[top], end[top]), calls)
    owner = np.searchsorted(start[top], busy[0], side="right") - 1
    compute = pd.DataFrame(
        {"name": names[top][owner], "kind": COMPUTE, "start_ns": busy[0], "end_ns": busy[1]}
    )
    # The outermost collective calls, shown as host-side 'other' activity.
    call_start, call_end, call_name = start[call], end[call], names[call]
    outer = np.ones(len(call_start), dtype=bool)
    if len(call_start) > 1:
        outer[1:] = call_start[1:] >= np.maximum.accumulate(call_end)[:-1]
    other = pd.DataFrame(
        {
            "name": call_name[outer],
            "kind": OTHER,
            "start_ns": call_start[outer],
            "end_ns": call_end[outer],
        }
    )
    return pd.concat([compute, other], ignore_index=True).assign(
        stream=int(ops["tid"].iloc[0]), collective="", bytes=UNKNOWN
    )
