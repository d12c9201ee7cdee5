"""Chrome traces (torch.profiler / Kineto JSON, optionally gzipped) -> RankTrace.

Events are parsed by HolisticTraceAnalysis' parser with its nanosecond rounding switched off,
decoded once, and turned into the kernel and range tables of ``tracekit.schema``.
"""

from __future__ import annotations

import gzip
import json
import logging
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
from tracekit.load import comm_args
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

# The event arguments tracekit reads (HTA's names for them).
ARG_NAMES = (
    "stream",
    "correlation",
    "external_id",
    "bytes",
    "collective_name",
    "in_msg_nelems",
    "out_msg_nelems",
    "msg_dtype",
    "input_dims",
    "input_type",
)
GPU_RANGE_CAT = "gpu_user_annotation"
HOST_RANGE_CATS = ("user_annotation", "cpu_op")
COMM_RECORD = "record_param_comms"  # host op that carries a collective's arguments
# Top-level key of a multi-rank file written by tracekit (see tracekit.export.perfetto).
MERGED_KEY = "tracekitRanks"
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def read_events(path: Path) -> tuple[dict[str, Any], pd.DataFrame]:
    """A Chrome trace's metadata and its timed events as one frame (``cat``, ``name``,
    ``pid``, ``tid``, ``start_ns``, ``end_ns`` and the ARG_NAMES columns); host and device
    events alike. Raise TracekitError naming the file when it is unusable."""
    _precheck(path)
    return _parse(path)


def load_chrome(path: Path, config: AnalysisConfig) -> list[RankTrace]:
    """Read a Chrome trace: one rank, or every rank of a file tracekit merged (MERGED_KEY).
    Raise TracekitError naming the file when it is unusable."""
    meta, events = read_events(path)
    merged = meta.get(MERGED_KEY)
    if merged is None:
        info = meta.get("distributedInfo") or {}
        rank_meta = {
            "world_size": _int_or_none(info.get("world_size")),
            "backend": info.get("backend"),
            "nccl_version": info.get("nccl_version"),
            "devices": [d.get("name") for d in meta.get("deviceProperties") or [] if d],
        }
        return [_rank_trace(events, _rank(meta, path), rank_meta, path, config)]
    return [
        _rank_trace(rank_events, rank, rank_meta, path, config)
        for rank, rank_meta, rank_events in _split_merged(merged, events, path)
    ]


def _rank_trace(
    events: pd.DataFrame, rank: int, meta: dict[str, Any], path: Path, config: AnalysisConfig
) -> RankTrace:
    gpu = (events["stream"].to_numpy() >= 0) & (events["cat"] != GPU_RANGE_CAT).to_numpy()
    host = events.loc[~gpu]
    ranges = host_ranges(host.loc[host["cat"].isin(HOST_RANGE_CATS)], rank, config)
    if gpu.any():
        kernels = _gpu_kernels(events.loc[gpu], host, ranges, rank, config)
        ranges, phase_source = _with_gpu_phases(events, ranges, kernels, rank, config)
        platform = "gpu"
    else:
        kernels = _cpu_kernels(host, ranges, rank, config)
        platform, phase_source = "cpu", "host"
    return RankTrace(
        rank=rank,
        source=path,
        kernels=kernels,
        ranges=ranges,
        platform=platform,
        world_size=meta.get("world_size"),
        meta={k: v for k, v in meta.items() if k != "world_size"} | {"phase_source": phase_source},
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
    except (KeyError, TypeError, ValueError, AttributeError):
        raise TracekitError(f"malformed {MERGED_KEY} header", path) from None
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

    known = {a.name: a for a in ParserConfig.get_default_args() + ParserConfig.ARGS_COMMUNICATION}
    return ParserConfig(args=[known[name] for name in ARG_NAMES])


def _parse(path: Path) -> tuple[dict[str, Any], pd.DataFrame]:
    """HTA-parse the file and decode it into one frame with ``start_ns``/``end_ns``."""
    from hta.common.trace_parser import parse_trace_dataframe

    try:
        with _hta_quiet_full_precision():
            meta, df, symbols = parse_trace_dataframe(str(path), _parser_config())
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise TracekitError(f"truncated or corrupt gzip ({e})", path) from None
    except json.JSONDecodeError as e:
        raise TracekitError(
            f"not valid JSON, possibly truncated ({e.msg} at line {e.lineno} column {e.colno})",
            path,
        ) from None
    except UnicodeDecodeError:
        raise TracekitError("not a text JSON file (undecodable bytes)", path) from None
    except (KeyError, ValueError, TypeError, AttributeError, IndexError):
        raise TracekitError(_diagnose(path), path) from None
    if df.empty or not {"ts", "dur", "name", "cat"} <= set(df.columns):
        raise TracekitError(_diagnose(path), path)
    table = np.asarray(symbols.get_sym_table(), dtype=object)
    name = table[df["name"].to_numpy()]
    bad_name = np.fromiter((not isinstance(n, str) for n in name), bool, len(name))
    if bad_name.any():
        raise TracekitError(f"{int(bad_name.sum())} events lack a name", path)
    if df["ts"].isna().any() or df["dur"].isna().any():
        raise TracekitError("events lack a timestamp or a duration", path)
    start = _ns(df["ts"])
    dur = _ns(df["dur"])
    if (dur < 0).any():
        first = int(np.argmax(dur < 0))
        raise TracekitError(
            f"{int((dur < 0).sum())} events have negative durations "
            f"(first: {name[first]!r}, dur={df['dur'].iloc[first]} µs)",
            path,
        )
    events = pd.DataFrame(
        {
            "cat": table[df["cat"].to_numpy()],
            "name": name,
            "pid": pd.to_numeric(df["pid"], errors="coerce").fillna(-1).to_numpy(np.int64),
            "tid": pd.to_numeric(df["tid"], errors="coerce").fillna(-1).to_numpy(np.int64),
            "start_ns": start,
            "end_ns": start + dur,
            **{a: df[a].to_numpy() for a in ARG_NAMES if a in df.columns},
        }
    )
    return meta, events


def _diagnose(path: Path) -> str:
    """Say why a file that parsed as JSON has nothing tracekit can use (error path only)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as fh:
            doc = json.loads(fh.read())
    except (OSError, EOFError, zlib.error, ValueError) as e:
        return f"unreadable trace ({type(e).__name__}: {e})"
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
    return "events of an unexpected shape (could not build a table from them)"


def _ns(values: pd.Series) -> np.ndarray:
    """Microseconds (int or float) -> integer nanoseconds, keeping the fraction."""
    v = values.to_numpy()
    if v.dtype.kind in "iu":
        return v.astype(np.int64) * 1000
    v = v.astype(np.float64)
    whole = np.floor(v)
    return whole.astype(np.int64) * 1000 + np.rint((v - whole) * 1000).astype(np.int64)


def _rank(meta: dict[str, Any], path: Path) -> int:
    rank = _int_or_none((meta.get("distributedInfo") or {}).get("rank"))
    if rank is not None:
        return rank
    found = _RANK_IN_NAME.search(path.name)
    if found:
        return int(found.group(1))
    raise TracekitError("no distributedInfo.rank and no rank number in the file name", path)


def _int_or_none(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


# --- GPU traces ----------------------------------------------------------------------------


def _gpu_kernels(
    gpu: pd.DataFrame,
    host: pd.DataFrame,
    ranges: pd.DataFrame,
    rank: int,
    config: AnalysisConfig,
) -> pd.DataFrame:
    """Kernels, copies and syncs, each with the time and step of the call that launched it."""
    launches = host.loc[host["correlation"] >= 0]
    launch_at = launches.groupby("correlation")["start_ns"].min()
    correlation = gpu["correlation"].to_numpy(np.int64)
    launch = launch_at.reindex(correlation).fillna(UNKNOWN).to_numpy(np.int64)
    kind = gpu_kinds(gpu["name"], config.classification)
    steps = ranges[ranges["kind"] == "step"]
    collective, nbytes = _collective_args(gpu, kind, launch, host)
    return gpu_kernel_table(
        rank,
        gpu.rename(columns={"pid": "device"}),
        kind=kind,
        launch=launch,
        steps=steps,
        collective=collective,
        nbytes=nbytes,
    )


def _collective_args(
    gpu: pd.DataFrame, kind: pd.Categorical, launch: np.ndarray, host: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray]:
    """Collective name and message bytes of comm kernels; bytes of copies for memory rows.

    Arguments come from the kernel itself (recent PyTorch), else from the record_param_comms
    host op whose span holds the launch, else the name comes from the kernel name alone.
    """
    n = len(gpu)
    is_comm = np.asarray(kind == COMM)
    collective = np.full(n, "", dtype=object)
    nbytes = np.where(np.asarray(kind == MEMORY), gpu["bytes"].to_numpy(np.int64), UNKNOWN)
    if not is_comm.any():
        return collective, nbytes
    own_name = gpu["collective_name"].astype(str).where(gpu["collective_name"].notna(), "")
    own_bytes = comm_args.message_bytes(
        gpu["in_msg_nelems"], gpu["out_msg_nelems"], gpu["msg_dtype"]
    )
    name = own_name.map(comm_args.normalize).to_numpy(dtype=object)
    size = own_bytes.copy()

    records = host.loc[
        (host["name"] == COMM_RECORD) & host["collective_name"].astype(str).ne("")
    ].sort_values("start_ns")
    need = is_comm & (name == "") & (launch >= 0)
    if need.any() and len(records):
        at = np.searchsorted(records["start_ns"].to_numpy(), launch, side="right") - 1
        safe = np.clip(at, 0, None)
        inside = need & (at >= 0) & (launch < records["end_ns"].to_numpy()[safe])
        rec_name = records["collective_name"].astype(str).map(comm_args.normalize).to_numpy()
        rec_bytes = comm_args.message_bytes(
            records["in_msg_nelems"], records["out_msg_nelems"], records["msg_dtype"]
        )
        name = np.where(inside, rec_name[safe], name)
        size = np.where(inside, rec_bytes[safe], size)
    from_kernel = comm_args.from_kernel_name(gpu["name"]).to_numpy(dtype=object)
    name = np.where(name == "", from_kernel, name)
    collective[is_comm] = name[is_comm]
    nbytes = np.where(is_comm, size, nbytes)
    return collective, nbytes


def _with_gpu_phases(
    events: pd.DataFrame,
    ranges: pd.DataFrame,
    kernels: pd.DataFrame,
    rank: int,
    config: AnalysisConfig,
) -> tuple[pd.DataFrame, str]:
    """Add GPU-side phase ranges (see ``AnalysisConfig.gpu_phases``); say which were used."""
    host_phases = ranges[ranges["kind"] == RANGE_PHASE]
    gpu_marks = events.loc[
        (events["cat"] == GPU_RANGE_CAT).to_numpy()
        & matches(events["name"], [config.phase_pattern])
    ]
    if config.gpu_phases == "annotation" and len(gpu_marks):
        host_marks = events.loc[events["cat"].isin(HOST_RANGE_CATS).to_numpy()]
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
    host: pd.DataFrame, ranges: pd.DataFrame, rank: int, config: AnalysisConfig
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
    comm_rows = pd.DataFrame(
        {
            "stream": comm["tid"].to_numpy(),
            "name": comm["name"].to_numpy(),
            "kind": COMM,
            "start_ns": comm["start_ns"].to_numpy(),
            "end_ns": comm["end_ns"].to_numpy(),
            "collective": comm["name"].str.split(":", n=1).str[-1].map(comm_args.normalize),
            "bytes": comm_args.shape_bytes(comm["input_dims"], comm["input_type"]),
        }
    )
    rows = pd.concat([comm_rows, *pieces], ignore_index=True)
    rows = rows.assign(
        rank=rank,
        device=CPU_DEVICE,
        launch_ns=rows["start_ns"],
        step=assign(rows["start_ns"].to_numpy(), steps),
        correlation=UNKNOWN,
        kind=pd.Categorical(rows["kind"], dtype=KIND_DTYPE),
        dtype="",
        pg="",
        pg_size=UNKNOWN,
    )
    if len(rows) == 0:
        return empty(KERNEL_COLUMNS)
    return conform(rows.sort_values("start_ns", kind="stable"), KERNEL_COLUMNS)


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
