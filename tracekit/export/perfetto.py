"""Every rank of a run in one Chrome-JSON trace that opens in ui.perfetto.dev.

The file, built from loaded ``RankTrace``s (so from Chrome traces and nsys exports alike):

- rank index ``i`` (ranks in order) owns pid ``(i + 1) * PID_STRIDE``, process "rank N" (host:
  steps, phases, the work itself on CPU traces, and on GPU traces the host ``cpu_op`` and CUDA
  runtime/driver events of the source Chrome trace on their threads), and pid
  ``(i + 1) * PID_STRIDE + 1 + d`` for GPU ``d``, process "rank N GPU d", one thread per stream;
- flow arrows from each launching runtime call to its kernel ("ac2g", by correlation id, as
  Kineto writes them), so a kernel traces back to the code; where the source has no host
  events (nsys, a merged file), one zero-length "cuda launch" slice per correlation instead;
- tracekit's own tracks, on each process with activity: "comm ∥ compute" (where communication
  overlaps compute) and "exposed comm" (communication with no compute), from
  ``tracekit.overlap.split``; GPU-side phases as slices on the GPU process;
- flow arrows linking the same collective across ranks, rank to next rank: the k-th
  collective of each type in each step (outside every step: in the whole trace);
- the ``tracekitRanks`` header (``tracekit.load.chrome.MERGED_KEY``, first in the file, as HTA
  reads top-level keys only up to ``traceEvents``) so tracekit reads every rank back:
  ``{"ranks": [{"rank", "world_size", "pids": {pid: device or -1}, "clock_offset_ns", ...}],
  "time_base_ns", "clock_alignment"}``. Times are µs after ``time_base_ns`` (the earliest
  time in the file); message sizes are written as byte counts (dtype "Byte") so they read back.

``--align`` moves each rank's clock so its collectives end when the lowest rank's do (the
median difference over the collectives matched on every rank); the offsets are in the header.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracekit.atomic import write_bytes
from tracekit.collectives import MATCH_KEY, keyed_comm
from tracekit.errors import TracekitError
from tracekit.load.chrome import MERGED_KEY, read_events
from tracekit.overlap import split
from tracekit.schema import COMM, CPU_DEVICE, MEMORY, RANGE_PHASE, RANGE_STEP, RankTrace

PID_STRIDE = 1000  # pids of rank index i: (i + 1) * PID_STRIDE and above, one per device
TRACK_TID = 1_000_000_000  # tids of tracekit's own tracks, above any stream or thread id
LAUNCH_TID, STEP_TID, OVERLAP_TID, EXPOSED_TID = (TRACK_TID + k for k in range(4))
PHASE_TID = TRACK_TID + 16  # + index of the phase name
# Slices that would overlap others on their thread go to extra lanes (Perfetto needs slices on
# a thread to nest): tid + lane * LANE_STRIDE for streams, + lane * TRACK_LANE for tracks.
LANE_STRIDE, TRACK_LANE, MAX_LANES = 100_000_000, 1000, 8
TRACK_NAMES = {
    LAUNCH_TID: "cuda launches",
    STEP_TID: "steps",
    OVERLAP_TID: "comm ∥ compute",
    EXPOSED_TID: "exposed comm",
}
OVERLAP_CAT, FLOW_CAT, GPU_PHASE_CAT = "tracekit_overlap", "tracekit_collective", "tracekit_phase"
# Host events kept from the source (Kineto's categories, and older Kineto's names for them).
HOST_CATS = {"cpu_op": "cpu_op", "operator": "cpu_op", "cuda_runtime": "cuda_runtime",
             "runtime": "cuda_runtime", "cuda_driver": "cuda_driver"}  # fmt: skip
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
KERNEL_KEY = ["rank", "device", "stream", "start_ns", "end_ns", "correlation"]  # finds a row
LAUNCH_FLOW = "ac2g"  # Kineto's flow category and name from a launch to its kernel
LAUNCH_FLOW_ID = 1 << 40  # launch flows of rank index i: ids (i + 1) * LAUNCH_FLOW_ID + corr
_X_COLUMNS = ["ph", "cat", "name", "pid", "tid", "ts_ns", "dur_ns", "args"]


@dataclass(frozen=True)
class Alignment:
    """How far each rank's clock was moved (ns added to its times)."""

    offsets_ns: dict[int, int]
    matched: int  # collectives matched on every rank that the offsets come from
    reference: int | None  # the rank whose clock the others follow

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": "median difference of matched collective end times",
            "reference_rank": self.reference,
            "matched_collectives": self.matched,
            "offsets_ns": {str(r): o for r, o in self.offsets_ns.items()},
        }


def single_run(groups: Mapping[str, Sequence[RankTrace]]) -> tuple[RankTrace, ...]:
    """The ranks of the one group given; a TracekitError when there are several (or none)."""
    if len(groups) != 1:
        names = ", ".join(groups) or "none"
        raise TracekitError(
            f"the paths hold {len(groups)} groups of traces ({names}); "
            "export one run (one group) at a time"
        )
    return tuple(sorted(next(iter(groups.values())), key=lambda t: t.rank))


def align_clocks(traces: Sequence[RankTrace]) -> Alignment:
    """Offsets that make each rank's matched collectives end when the lowest rank's do."""
    ranks = sorted(t.rank for t in traces)
    m = keyed_comm(traces)
    zero = {r: 0 for r in ranks}
    if len(ranks) < 2 or m.empty:
        return Alignment(zero, 0, ranks[0] if ranks else None)
    reference = ranks[0]
    ref_end = m.loc[m["rank"] == reference].set_index(MATCH_KEY)["end_ns"]
    keys = pd.MultiIndex.from_frame(m[MATCH_KEY])
    diff = ref_end.reindex(keys).to_numpy() - m["end_ns"].to_numpy()
    median = pd.Series(diff).groupby(m["rank"].to_numpy()).median()
    offsets = zero | {int(r): int(np.rint(v)) for r, v in median.items()}
    return Alignment(offsets, int(len(m) // len(ranks)), reference)


def merged_trace(
    traces: Sequence[RankTrace], alignment: Alignment | None = None, *, host: bool = True
) -> dict:
    """The Chrome-JSON document (a dict) holding every rank of ``traces``. ``host``: keep the
    host ``cpu_op`` and runtime events of each GPU rank's source Chrome trace (read again
    from ``RankTrace.source``), with launch-to-kernel flows."""
    traces = sorted(traces, key=lambda t: t.rank)
    if not traces:
        raise TracekitError("no ranks to export")
    offsets = alignment.offsets_ns if alignment else {}
    shifted = [_shift(t, offsets.get(t.rank, 0)) for t in traces]
    hosts = [_shift_host(host_events(t), offsets.get(t.rank, 0)) if host else None for t in traces]
    base = min(_earliest(t, h) for t, h in zip(shifted, hosts, strict=True))
    x_frames: list[pd.DataFrame] = []
    meta: list[dict[str, Any]] = []
    header = []
    launch_flows: list[dict[str, Any]] = []
    kernel_tids: list[np.ndarray] = []
    for i, trace in enumerate(shifted):
        frames, names, pids = _rank_events(i, trace, hosts[i])
        kernel_tids.append(frames[0]["tid"].to_numpy(np.int64))  # one row per kernel row
        launch_flows.extend(_launch_flows(i, trace, kernel_tids[-1], hosts[i], base))
        x_frames.extend(frames)
        meta.extend(names)
        header.append(
            {
                "rank": trace.rank,
                "world_size": trace.world_size,
                "pids": {str(p): d for p, d in pids.items()},
                "platform": trace.platform,
                "source": str(trace.source),
                "clock_offset_ns": offsets.get(trace.rank, 0),
            }
        )
    kept = [f for f in x_frames if len(f)]
    x = pd.concat(kept, ignore_index=True) if kept else pd.DataFrame(columns=_X_COLUMNS)
    x = x.assign(ts=(x["ts_ns"] - base) / 1e3, dur=x["dur_ns"] / 1e3)
    events = x[["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"]].to_dict("records")
    flows = _flows(shifted, kernel_tids, base) + launch_flows
    return {
        MERGED_KEY: {
            "ranks": header,
            "time_base_ns": int(base),
            "clock_alignment": alignment.as_dict() if alignment else None,
        },
        "displayTimeUnit": "ns",
        "traceEvents": meta + events + flows,
    }


def write_trace(doc: dict, path: Path, *, force: bool = False) -> None:
    """Write ``doc`` as JSON (gzipped for ``.gz``) atomically. Refuse to replace an existing
    file unless ``force``."""
    if path.exists() and not force:
        raise TracekitError("already exists; pass --force to replace it", path)
    if not path.parent.is_dir():
        raise TracekitError("its directory does not exist", path)
    data = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    write_bytes(path, data)


# --- building --------------------------------------------------------------------------------


def _shift(trace: RankTrace, offset: int) -> RankTrace:
    """The trace with every time moved by ``offset`` ns (new frames; the input is untouched)."""
    if offset == 0:
        return trace
    k, r = trace.kernels, trace.ranges
    launch = k["launch_ns"].to_numpy()
    kernels = k.assign(
        start_ns=k["start_ns"] + offset,
        end_ns=k["end_ns"] + offset,
        launch_ns=np.where(launch >= 0, launch + offset, launch),
    )
    ranges = r.assign(start_ns=r["start_ns"] + offset, end_ns=r["end_ns"] + offset)
    return _with_kernels(trace, kernels, ranges)


def _with_kernels(
    trace: RankTrace, kernels: pd.DataFrame, ranges: pd.DataFrame | None = None
) -> RankTrace:
    ranges = trace.ranges if ranges is None else ranges
    return RankTrace(
        trace.rank, trace.source, kernels, ranges, trace.platform, trace.world_size, trace.meta
    )


def _earliest(trace: RankTrace, host: pd.DataFrame | None = None) -> int:
    k, r = trace.kernels, trace.ranges
    launch = k["launch_ns"][k["launch_ns"] >= 0]
    times = [k["start_ns"], r["start_ns"], launch]
    if host is not None:
        times.append(host["start_ns"])
    found = [int(t.min()) for t in times if len(t)]
    return min(found) if found else 0


# --- host events of the source --------------------------------------------------------------

# tid: the thread written (the source's, or one below TRACK_TID for an id at or above it);
# thread: the source's thread id, for the thread's name
HOST_COLUMNS = ["cat", "name", "tid", "thread", "start_ns", "end_ns", "correlation"]


def host_events(trace: RankTrace) -> pd.DataFrame | None:
    """The host ``cpu_op`` and CUDA runtime/driver events of a GPU rank's source Chrome trace
    (HOST_COLUMNS; categories as HOST_CATS names them), without the step and phase ranges the
    export writes itself; None when the source is not a one-rank Chrome trace or cannot be
    read again (the export then marks launches with zero-length slices)."""
    name = trace.source.name.lower()
    if trace.platform != "gpu" or not name.endswith((".json", ".json.gz")):
        return None
    try:
        meta, events = read_events(trace.source)
    except (TracekitError, OSError, MemoryError):
        return None
    if MERGED_KEY in meta or "correlation" not in events:
        return None
    cat = events["cat"].astype(str).str.lower().map(HOST_CATS)
    keep = cat.notna().to_numpy()
    ev = events.loc[keep, ["name", "tid", "start_ns", "end_ns", "correlation"]]
    ev = ev.assign(cat=cat[keep].to_numpy(), name=ev["name"].astype(str))
    ranges = trace.ranges.loc[trace.ranges["device"] == CPU_DEVICE, ["name", "start_ns", "end_ns"]]
    written = pd.MultiIndex.from_frame(ranges.astype({"name": str}))
    mine = pd.MultiIndex.from_frame(ev[["name", "start_ns", "end_ns"]])
    ev = ev.loc[~mine.isin(written)]
    return _nested(_own_tids(ev)[HOST_COLUMNS].astype({"correlation": np.int64}))


def _own_tids(ev: pd.DataFrame) -> pd.DataFrame:
    """``ev`` with ``thread`` (the source's thread id) and ``tid``: the same, except that ids
    at or above TRACK_TID (Kineto writes some as large or hashed numbers) move just below it,
    where they cannot be taken for tracekit's own tracks."""
    thread = ev["tid"].to_numpy(np.int64)
    big = np.unique(thread[thread >= TRACK_TID])
    tid = thread.copy()
    if big.size:
        at = np.searchsorted(big, thread[thread >= TRACK_TID])
        tid[thread >= TRACK_TID] = TRACK_TID - 1 - at
    return ev.assign(tid=tid, thread=thread)


def _nested(ev: pd.DataFrame) -> pd.DataFrame:
    """Host events with each end cut to its enclosing event's end, so that the slices on a
    thread nest as Perfetto needs (a loop over events: host events are thousands)."""
    ev = ev.sort_values(["tid", "start_ns", "end_ns"], ascending=[True, True, False])
    tid = ev["tid"].to_numpy(np.int64)
    start = ev["start_ns"].to_numpy(np.int64)
    end = ev["end_ns"].to_numpy(np.int64).copy()
    stack: list[int] = []
    for i in range(end.size):
        if i and tid[i] != tid[i - 1]:
            stack.clear()
        while stack and stack[-1] <= start[i]:
            stack.pop()
        if stack and end[i] > stack[-1]:
            end[i] = stack[-1]
        stack.append(int(end[i]))
    return ev.assign(end_ns=end).reset_index(drop=True)


def _shift_host(host: pd.DataFrame | None, offset: int) -> pd.DataFrame | None:
    if host is None or offset == 0:
        return host
    return host.assign(start_ns=host["start_ns"] + offset, end_ns=host["end_ns"] + offset)


def _host_slices(host: pd.DataFrame, pid: int) -> pd.DataFrame:
    args = _records({"correlation": host["correlation"].to_numpy()}, len(host))
    args = [a if a["correlation"] >= 0 else {} for a in args]
    return _x(
        host["cat"].to_numpy(),
        host["name"].to_numpy(),
        pid,
        host["tid"].to_numpy(np.int64),
        host["start_ns"].to_numpy(np.int64),
        host["end_ns"].to_numpy(np.int64),
        args,
    )


def _launch_flows(
    index: int, trace: RankTrace, tids: np.ndarray, host: pd.DataFrame | None, base: int
) -> list[dict[str, Any]]:
    """Kineto's "ac2g" flows: from the runtime call that launched each GPU row (by correlation
    id) to the row, or from the "cuda launch" slice where the source has no host events."""
    k = trace.kernels
    gpu = (k["device"].to_numpy() >= 0) & (k["correlation"].to_numpy() >= 0)
    if host is not None:
        calls = host[host["cat"].isin(LAUNCH_CATS) & (host["correlation"] >= 0)]
        calls = calls.drop_duplicates("correlation").set_index("correlation")
        src_ts, src_tid = calls["start_ns"], calls["tid"]
    else:
        launched = k[gpu & (k["launch_ns"].to_numpy() >= 0)]
        src_ts = launched.groupby("correlation")["launch_ns"].min()
        src_tid = pd.Series(LAUNCH_TID, index=src_ts.index)
    rows = np.flatnonzero(gpu & k["correlation"].isin(src_ts.index).to_numpy())
    rows = rows[~k["correlation"].iloc[rows].duplicated().to_numpy()]  # one arrow per call
    if rows.size == 0:
        return []
    corr = k["correlation"].to_numpy(np.int64)[rows]
    ids = (index + 1) * LAUNCH_FLOW_ID + corr
    host_pid = int(_pid(index, CPU_DEVICE))
    start = pd.DataFrame(
        {
            "ph": "s",
            "cat": LAUNCH_FLOW,
            "name": LAUNCH_FLOW,
            "id": ids,
            "pid": host_pid,
            "tid": src_tid.reindex(corr).to_numpy(np.int64),
            "ts": (src_ts.reindex(corr).to_numpy(np.int64) - base) / 1e3,
        }
    )
    end = pd.DataFrame(
        {
            "ph": "f",
            "bp": "e",
            "cat": LAUNCH_FLOW,
            "name": LAUNCH_FLOW,
            "id": ids,
            "pid": _pid(index, k["device"].to_numpy(np.int64)[rows]),
            "tid": tids[rows],
            "ts": (k["start_ns"].to_numpy(np.int64)[rows] - base) / 1e3,
        }
    )
    return start.to_dict("records") + end.to_dict("records")


def _pid(index: Any, device: Any) -> np.ndarray:
    """pid of rank index ``index``'s host (device -1) or of its GPU ``device`` (vectorised)."""
    host = (np.asarray(index) + 1) * PID_STRIDE
    return np.where(np.asarray(device) >= 0, host + 1 + np.asarray(device), host)


def _x(cat: Any, name: Any, pid: Any, tid: Any, start: Any, end: Any, args: list) -> pd.DataFrame:
    """Complete ('X') events as a frame (vectorised over arrays)."""
    frame = pd.DataFrame(
        {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts_ns": start}
    )
    frame["dur_ns"] = np.asarray(end, dtype=np.int64) - frame["ts_ns"].to_numpy(np.int64)
    frame["args"] = args if len(args) else [{}] * len(frame)
    return frame[_X_COLUMNS]


def _records(columns: Mapping[str, Any], n: int) -> list[dict[str, Any]]:
    """Per-event ``args`` dicts from columns (arrays or scalars)."""
    return pd.DataFrame(dict(columns), index=range(n)).to_dict("records") if n else []


def _rank_events(
    index: int, trace: RankTrace, host_ops: pd.DataFrame | None = None
) -> tuple[list[pd.DataFrame], list[dict[str, Any]], dict[int, int]]:
    """X-event frames (the first: one row per kernel row, in order), metadata events and the
    pid -> device map of one rank. ``host_ops``: the source's host events (``host_events``),
    written on their threads in place of the "cuda launch" slices."""
    k, r = trace.kernels, trace.ranges
    host = int(_pid(index, CPU_DEVICE))
    devices = sorted({int(d) for d in (*k["device"].unique(), *r["device"].unique()) if d >= 0})
    pids = {host: CPU_DEVICE} | {int(_pid(index, d)): d for d in devices}
    activity = _activity(k, index)
    # CPU rows keep their thread (tracekit reads CPU work by thread); the rest is display only
    launches = _launches(k, host) if host_ops is None else _host_slices(host_ops, host)
    frames = [
        _laned(activity, k["device"].to_numpy() >= 0),
        *(
            _laned(f) if f is not launches or host_ops is None else f
            for f in (
                launches,
                *_ranges(r, index),
                *(
                    _tracks(k[k["device"] == d], int(_pid(index, d)))
                    for d in (CPU_DEVICE, *devices)
                ),
            )
        ),
    ]
    meta = [m for pid, device in pids.items() for m in _process_meta(pid, trace.rank, device)]
    phase_names = r.loc[r["kind"] == RANGE_PHASE, "name"].drop_duplicates().tolist()
    comm = k.loc[k["kind"] == COMM, ["device", "stream"]].drop_duplicates()
    comm_pids = _pid(index, comm["device"].to_numpy()).tolist()
    comm_threads = set(zip(comm_pids, comm["stream"].tolist(), strict=True))
    source_threads = (
        dict(zip(host_ops["tid"].tolist(), host_ops["thread"].tolist(), strict=True))
        if host_ops is not None
        else {}
    )
    for frame in frames:
        for pid, tid in frame[["pid", "tid"]].drop_duplicates().itertuples(index=False):
            name = _thread_name(int(tid), pids[int(pid)], phase_names, comm_threads, int(pid))
            if int(pid) == host and int(tid) in source_threads:
                name = f"thread {source_threads[int(tid)]}"
            meta.append(_meta("thread_name", int(pid), int(tid), name=name))
            meta.append(_meta("thread_sort_index", int(pid), int(tid), sort_index=int(tid)))
    unique = {(m["name"], m["pid"], m["tid"]): m for m in meta}
    return frames, list(unique.values()), pids


def _activity(k: pd.DataFrame, index: int) -> pd.DataFrame:
    """Kernels, copies and CPU spans, with the args tracekit reads back."""
    device = k["device"].to_numpy()
    kind = k["kind"].astype(str).to_numpy()
    name = k["name"].astype(str)
    nbytes = k["bytes"].to_numpy(np.int64)
    gpu, comm, sized = device >= 0, kind == COMM, nbytes >= 0
    memset = name.str.startswith("Memset").to_numpy()
    cat = np.where(kind == MEMORY, np.where(memset, "gpu_memset", "gpu_memcpy"), "kernel")
    cat = np.where(gpu, cat, "cpu_op")

    def gpu_args(mask: np.ndarray, **extra: Any) -> dict[str, Any]:
        return {
            "stream": k["stream"].to_numpy()[mask],
            "correlation": k["correlation"].to_numpy()[mask],
            "device": device[mask],
            "kind": kind[mask],
            "bytes": nbytes[mask],
        } | extra

    def collective(mask: np.ndarray) -> dict[str, Any]:
        return {"Collective name": k["collective"].to_numpy()[mask]}

    # One group of rows per set of arg names; sizes as byte counts of dtype "Byte".
    groups = {
        "gpu": (gpu & ~comm, gpu_args),
        "gpu comm": (gpu & comm & ~sized, lambda m: gpu_args(m, **collective(m))),
        "gpu comm sized": (
            gpu & comm & sized,
            lambda m: (
                gpu_args(
                    m, **collective(m), **{"In msg nelems": nbytes[m], "Out msg nelems": nbytes[m]}
                )
                | {"dtype": "Byte"}
            ),
        ),
        "cpu comm sized": (
            ~gpu & comm & sized,
            lambda m: {
                "Input Dims": list(nbytes[m][:, None, None].tolist()),
                "Input type": [["Byte"]] * int(m.sum()),
            },
        ),
    }
    args = np.empty(len(k), dtype=object)
    args[:] = [{}] * len(k)
    for mask, columns in groups.values():
        if mask.any():
            args[np.flatnonzero(mask)] = _records(columns(mask), int(mask.sum()))
    return _x(
        cat,
        name.to_numpy(),
        _pid(index, device),
        k["stream"].to_numpy(),
        k["start_ns"].to_numpy(),
        k["end_ns"].to_numpy(),
        args.tolist(),
    )


def _launches(k: pd.DataFrame, host: int) -> pd.DataFrame:
    """A zero-length slice per launch correlation, where the launching call began."""
    launched = k[(k["launch_ns"] >= 0) & (k["correlation"] >= 0) & (k["device"] >= 0)]
    first = launched.groupby("correlation", sort=True)["launch_ns"].min()
    at = first.to_numpy()
    args = _records({"correlation": first.index.to_numpy()}, len(first))
    return _x("cuda_runtime", "cuda launch", host, LAUNCH_TID, at, at, args)


def _ranges(r: pd.DataFrame, index: int) -> list[pd.DataFrame]:
    """Steps and host phases as user annotations; GPU-side phases on the GPU process."""
    names = {n: i for i, n in enumerate(r.loc[r["kind"] == RANGE_PHASE, "name"].unique())}
    steps = r[r["kind"] == RANGE_STEP]
    phases = r[r["kind"] == RANGE_PHASE]
    on_host = phases["device"].to_numpy() == CPU_DEVICE
    tid = PHASE_TID + phases["name"].map(names).to_numpy(np.int64)
    step_args = _records({"step": steps["step"].to_numpy()}, len(steps))
    phase_args = _records({"step": phases["step"].to_numpy()}, len(phases))
    cats = np.where(on_host, "user_annotation", GPU_PHASE_CAT)
    return [
        _x(
            "user_annotation",
            steps["name"].to_numpy(),
            _pid(index, CPU_DEVICE),
            STEP_TID,
            steps["start_ns"].to_numpy(),
            steps["end_ns"].to_numpy(),
            step_args,
        ),
        _x(
            cats,
            phases["name"].to_numpy(),
            _pid(index, phases["device"].to_numpy()),
            tid,
            phases["start_ns"].to_numpy(),
            phases["end_ns"].to_numpy(),
            phase_args,
        ),
    ]


def _tracks(k: pd.DataFrame, pid: int) -> pd.DataFrame:
    """Slices where communication overlaps compute, and where it runs alone (one process)."""
    parts = split(k)
    both, alone = parts.both, parts.exposed
    return pd.concat(
        [
            _x(OVERLAP_CAT, "comm ∥ compute", pid, OVERLAP_TID, both[0], both[1], []),
            _x(OVERLAP_CAT, "exposed comm", pid, EXPOSED_TID, alone[0], alone[1], []),
        ],
        ignore_index=True,
    )


def _flows(
    traces: Sequence[RankTrace], tids: Sequence[np.ndarray], base: int
) -> list[dict[str, Any]]:
    """Flow arrows (v1: 's' then 'f' with bp 'e') from each rank's instance of a matched
    collective to the next rank's, each anchored mid-slice. ``tids``: per trace, the thread
    each kernel row was written on."""
    m = keyed_comm(traces)
    if m.empty:
        return []
    where = pd.concat(
        [
            t.kernels[KERNEL_KEY].assign(tid=tid)
            for t, tid in zip(traces, tids, strict=True)
            if len(t.kernels)
        ],
        ignore_index=True,
    ).drop_duplicates(KERNEL_KEY)
    m = m.merge(where, on=KERNEL_KEY, how="left", validate="many_to_one")
    index = {t.rank: i for i, t in enumerate(sorted(traces, key=lambda t: t.rank))}
    same = (m[MATCH_KEY].shift(-1) == m[MATCH_KEY]).all(axis=1).to_numpy()
    rank_index = m["rank"].map(index).to_numpy()
    pid = _pid(rank_index, m["device"].to_numpy())
    ends = pd.DataFrame(
        {
            "cat": FLOW_CAT,
            "name": m["collective"].to_numpy(),
            "pid": pid,
            "tid": m["tid"].to_numpy(),
            "ts": ((m["start_ns"] + m["end_ns"]) // 2 - base).to_numpy() / 1e3,
        }
    )
    src = np.flatnonzero(same)
    ids = np.arange(1, src.size + 1)
    out = ends.iloc[src].assign(ph="s", id=ids)
    into = ends.iloc[src + 1].assign(ph="f", id=ids, bp="e")
    return out.to_dict("records") + into.to_dict("records")


def _meta(kind: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": args}


def _process_meta(pid: int, rank: int, device: int) -> list[dict[str, Any]]:
    name = f"rank {rank}" if device == CPU_DEVICE else f"rank {rank} GPU {device}"
    return [
        _meta("process_name", pid, 0, name=name),
        _meta("process_sort_index", pid, 0, sort_index=pid),
    ]


def _thread_name(
    tid: int, device: int, phases: list[str], comm: set[tuple[int, int]], pid: int
) -> str:
    """'stream 7', 'stream 84 (comm)', 'thread 123', 'steps', 'phase: forward', ...; lanes
    past the first get ' (lane n)'."""
    if tid >= TRACK_TID:
        lane, offset = divmod(tid - TRACK_TID, TRACK_LANE)
        base = TRACK_TID + offset
        name = TRACK_NAMES.get(base) or f"phase: {phases[base - PHASE_TID]}"
    else:
        lane, base = divmod(tid, LANE_STRIDE) if device >= 0 else (0, tid)
        name = f"{'stream' if device >= 0 else 'thread'} {base}"
        name += " (comm)" if (pid, base) in comm else ""
    return name + (f" (lane {lane + 1})" if lane else "")


def _laned(frame: pd.DataFrame, movable: np.ndarray | None = None) -> pd.DataFrame:
    """``frame`` with the tids of slices that overlap an earlier slice on their thread moved
    to a further lane, so that every (pid, tid) holds disjoint slices (a sweep per lane)."""
    start = frame["ts_ns"].to_numpy(np.int64)
    end = start + frame["dur_ns"].to_numpy(np.int64)
    pid, tid = frame["pid"].to_numpy(np.int64), frame["tid"].to_numpy(np.int64)
    movable = np.ones(len(frame), dtype=bool) if movable is None else movable
    lane = np.zeros(len(frame), dtype=np.int64)
    for level in range(MAX_LANES - 1):
        at = np.flatnonzero((lane == level) & movable)
        if at.size < 2:
            break
        at = at[np.lexsort((-end[at], start[at], tid[at], pid[at]))]
        thread = pd.Series(pid[at] * (1 << 32) + tid[at])
        reach = pd.Series(end[at]).groupby(thread.to_numpy()).cummax()
        first = np.iinfo(np.int64).min  # nothing before the first slice of a thread
        before = reach.groupby(thread.to_numpy()).shift(1, fill_value=first).to_numpy(np.int64)
        overlaps = start[at] < before
        if not overlaps.any():
            break
        lane[at[overlaps]] = level + 1
    stride = np.where(tid >= TRACK_TID, TRACK_LANE, LANE_STRIDE)
    return frame.assign(tid=tid + lane * stride)
