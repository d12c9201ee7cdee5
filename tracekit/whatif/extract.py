"""From one rank's trace: when each gradient is ready, how big it is, and the compute timeline
around it, per step; plus the measured collectives the cost model is fitted to.

Times stay as they were measured (wall time and the part of it that overlapped communication);
``schedule`` turns them into compute work with the contention factor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tracekit import intervals as iv
from tracekit.config import AnalysisConfig
from tracekit.errors import TracekitError
from tracekit.load.comm_args import shape_bytes
from tracekit.schema import COMM, COMPUTE, CPU_DEVICE, RANGE_PHASE, RANGE_STEP, RankTrace

ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"  # one per parameter per backward
# Its autograd wrapper, the only one some traces keep.
ACCUMULATE_GRAD_WRAPPER = "autograd::engine::evaluate_function: " + ACCUMULATE_GRAD
COLLECTIVE_CALL = re.compile(r"^c10d::allreduce_$")  # the host call that launches one
DIV_OP = "aten::div_"  # gradient averaging, in place: reads and writes every byte once
GRADIENT_COLLECTIVE = "allreduce"
_PHASE = re.compile(r"^(?:## )?(forward|backward|allreduce|optimizer)(?: ##)?$")


@dataclass(frozen=True)
class StepInputs:
    """One measured step, reduced to what the schedules need. Times in ns, relative to the
    start of the step's activity unless said otherwise."""

    step: int  # step number
    measured_ns: float  # the step's measured duration (host range on CPU, GPU span on GPU)
    pre_ns: float  # step start to backward start (forward, zero_grad, ...): wall time
    pre_overlap_ns: float  # of which communication ran alongside
    ready_ns: np.ndarray  # wall time from backward start to each gradient's ready time
    ready_overlap_ns: np.ndarray  # of which communication ran alongside
    sizes: np.ndarray  # bytes of each gradient, in ready order
    backward_ns: float  # backward start to backward end: wall time
    backward_overlap_ns: float  # of which communication ran alongside
    post_ns: float  # end of gradient sync to step end (optimizer, ...): wall time
    post_overlap_ns: float  # of which communication ran alongside
    sync_ns: float  # backward end to end of gradient sync: wall time
    sync_host_ns: float  # of which no gradient communication ran (calls, copies, wake-ups)
    sync_waited: int  # gradient collectives that finished inside the sync phase
    sync_bytes: float  # bytes of gradients averaged in the sync phase
    launched_in_backward: int  # gradient collectives that started before backward ended


@dataclass(frozen=True)
class Extracted:
    """Everything ``schedule`` and ``costmodel`` need from one rank's trace."""

    source: Path  # the trace file
    rank: int  # the rank it recorded
    platform: str  # "cpu" or "gpu"
    variant: str  # measured variant: from the directory name, else inferred from the calls
    steps: tuple[StepInputs, ...]  # the headline steps (every step but the last)
    # measured collectives: collective, bytes, duration_ns, step, and compute_overlap_ns (the
    # part of the duration compute ran alongside)
    collectives: pd.DataFrame
    copy_ns_per_byte: float | None  # cost of copying a byte (from in-place div_); None unknown
    launch_ns: float  # host time of one collective call on the compute thread (CPU), else 0
    sizes_from: str  # where gradient sizes came from
    notes: tuple[str, ...]  # what a reader must know about the extraction


def extract(path: Path, rank: int | None = None, variant: str | None = None) -> Extracted:
    """Read one rank of ``path`` (a Chrome trace); raise TracekitError naming the file when
    it has no steps or no gradient-ready events."""
    from tracekit.load import load_file
    from tracekit.load.chrome import read_events

    traces = load_file(path, AnalysisConfig())
    if rank is not None:
        traces = [t for t in traces if t.rank == rank]
        if not traces:
            raise TracekitError(f"no rank {rank} in this trace", path)
    trace = traces[0]
    _, events = read_events(path)
    return from_trace(trace, events, variant)


def from_trace(trace: RankTrace, events: pd.DataFrame, variant: str | None = None) -> Extracted:
    """The pure part of ``extract``: a loaded rank and its raw events."""
    path = trace.source
    notes: list[str] = []
    steps = trace.ranges[trace.ranges["kind"] == RANGE_STEP].sort_values("start_ns")
    if len(steps) == 0:
        raise TracekitError("no step ranges (ProfilerStep#N or step#N): nothing to predict", path)
    headline = steps.iloc[:-1] if len(steps) > 1 else steps
    host = events.loc[events["stream"].to_numpy() < 0]
    acc = host.loc[(host["name"] == ACCUMULATE_GRAD).to_numpy()].sort_values("end_ns")
    if len(acc) == 0:
        acc = host.loc[(host["name"] == ACCUMULATE_GRAD_WRAPPER).to_numpy()].sort_values("end_ns")
    if len(acc) == 0:
        raise TracekitError(
            f"no {ACCUMULATE_GRAD} operators: gradient-ready times unknown (profile the "
            "backward pass with torch.profiler)",
            path,
        )
    kernels = trace.kernels
    comm = kernels.loc[(kernels["kind"] == COMM).to_numpy()]
    grad_comm = comm.loc[(comm["collective"] == GRADIENT_COLLECTIVE).to_numpy()]
    comm_iv = iv.union(comm["start_ns"].to_numpy(), comm["end_ns"].to_numpy())
    gpu = trace.platform == "gpu"
    ready_at = _ready_times_gpu(acc, kernels) if gpu else acc["end_ns"].to_numpy(np.int64)
    if gpu:
        notes.append(
            "gradient ready = end of the last kernel its AccumulateGrad launched, else of the "
            "last kernel launched (on any thread) before it ended"
        )
    acc_bytes = shape_bytes(acc["input_dims"], acc["input_type"])
    phases = _phases(trace)
    rows = []
    sizes_from = "AccumulateGrad Input Dims"
    for number, s_start, s_end in headline[["step", "start_ns", "end_ns"]].itertuples(False):
        in_step = (acc["start_ns"].to_numpy() >= s_start) & (acc["start_ns"].to_numpy() < s_end)
        if not in_step.any():
            continue
        ready = ready_at[in_step]
        order = np.argsort(ready, kind="stable")
        ready, sizes = ready[order], acc_bytes[in_step][order]
        mine = grad_comm.loc[(grad_comm["step"] == number).to_numpy()]
        if (sizes <= 0).any():
            sizes, sizes_from = _sizes_from_comm(len(ready), mine), "the step's all-reduce bytes"
        step_kernels = kernels.loc[(kernels["step"] == number).to_numpy()]
        if gpu:
            if len(step_kernels) == 0:
                continue
            start = int(step_kernels["start_ns"].min())
            end = int(step_kernels["end_ns"].max())
        else:
            start, end = int(s_start), int(s_end)
        mine_phases = phases.get(int(number), {})
        b0, b1 = mine_phases.get("backward", (int(ready[0]), int(ready[-1])))
        b0, b1 = min(b0, int(ready[0])), max(b1, int(ready[-1]))
        comm_end = int(mine["end_ns"].max()) if len(mine) else b1
        sync_end = mine_phases.get("optimizer", (max(comm_end, b1), 0))[0]
        sync_end = min(max(sync_end, b1), end)
        sync_host, waited, sync_bytes = _sync(host, mine, b1, sync_end, comm_iv, gpu)
        rows.append(
            StepInputs(
                step=int(number),
                measured_ns=float(end - start),
                pre_ns=float(b0 - start),
                pre_overlap_ns=_overlap(comm_iv, start, b0),
                ready_ns=(ready - b0).astype(np.float64),
                ready_overlap_ns=np.array([_overlap(comm_iv, b0, r) for r in ready]),
                sizes=sizes.astype(np.float64),
                backward_ns=float(b1 - b0),
                backward_overlap_ns=_overlap(comm_iv, b0, b1),
                post_ns=float(end - sync_end),
                post_overlap_ns=_overlap(comm_iv, sync_end, end),
                sync_ns=float(sync_end - b1),
                sync_host_ns=sync_host,
                sync_waited=waited,
                sync_bytes=sync_bytes,
                launched_in_backward=int((mine["start_ns"].to_numpy() < b1).sum()),
            )
        )
    if not rows:
        raise TracekitError("no gradient-ready events inside the headline steps", path)
    if sizes_from != "AccumulateGrad Input Dims":
        notes.append(
            "AccumulateGrad has no Input Dims (record_shapes off): gradient sizes are the step's "
            "all-reduced bytes shared over its gradients"
        )
    compute = kernels.loc[(kernels["kind"] == COMPUTE).to_numpy()]
    compute_iv = iv.union(compute["start_ns"].to_numpy(), compute["end_ns"].to_numpy())
    collectives = pd.DataFrame(
        {
            "collective": comm["collective"].to_numpy(),
            "bytes": comm["bytes"].to_numpy(np.int64),
            "duration_ns": (comm["end_ns"] - comm["start_ns"]).to_numpy(np.int64),
            "step": comm["step"].to_numpy(np.int64),
            "compute_overlap_ns": [
                _overlap(compute_iv, a, b)
                for a, b in zip(comm["start_ns"].to_numpy(), comm["end_ns"].to_numpy(), strict=True)
            ],
        }
    )
    head_steps = set(int(s) for s in headline["step"])
    collectives = collectives[collectives["step"].isin(head_steps)].reset_index(drop=True)
    copy_rate = None if gpu else _copy_rate(host)
    if copy_rate is None:
        notes.append("no copy rate in the trace: flatten/unflatten and averaging copies cost 0")
    launch = 0.0 if gpu else _launch_ns(host)
    return Extracted(
        source=path,
        rank=trace.rank,
        platform=trace.platform,
        variant=variant or infer_variant(rows, grad_comm),
        steps=tuple(rows),
        collectives=collectives,
        copy_ns_per_byte=copy_rate,
        launch_ns=launch,
        sizes_from=sizes_from,
        notes=tuple(notes),
    )


def infer_variant(steps: list[StepInputs], grad_comm: pd.DataFrame) -> str:
    """Which variant a trace shows, from its gradient all-reduces: none during backward and one
    per gradient is naive, one in all is flat; during backward, one per gradient is overlap,
    fewer is bucketed."""
    if len(grad_comm) == 0:
        return "unknown"
    per_step = len(grad_comm) / max(len(steps), 1)
    grads = float(np.median([len(s.sizes) for s in steps]))
    during = any(s.launched_in_backward > 0 for s in steps)
    if during:
        return "overlap" if per_step >= 0.9 * grads else "bucketed"
    return "flat" if per_step <= 1.5 else "naive"


def _phases(trace: RankTrace) -> dict[int, dict[str, tuple[int, int]]]:
    """Per step, each workload phase's first start and last end on the device that ran it."""
    r = trace.ranges[trace.ranges["kind"] == RANGE_PHASE]
    on_gpu = r["device"] != CPU_DEVICE
    r = r[on_gpu] if trace.platform == "gpu" else r[~on_gpu]
    out: dict[int, dict[str, tuple[int, int]]] = {}
    for step, name, start, end in r[["step", "name", "start_ns", "end_ns"]].itertuples(False):
        found = _PHASE.match(str(name))
        if not found or step < 0:
            continue
        phase = out.setdefault(int(step), {})
        lo, hi = phase.get(found.group(1), (start, end))
        phase[found.group(1)] = (min(lo, start), max(hi, end))
    return out


def _ready_times_gpu(acc: pd.DataFrame, kernels: pd.DataFrame) -> np.ndarray:
    """End of the last GPU kernel each AccumulateGrad launched (by launch time inside the
    operator); when it launched none (the gradient was moved in, not added), the end of the
    last kernel launched before it ended."""
    launched = kernels.loc[(kernels["launch_ns"] >= 0).to_numpy()].sort_values("launch_ns")
    launch = launched["launch_ns"].to_numpy(np.int64)
    end = launched["end_ns"].to_numpy(np.int64)
    before = np.maximum.accumulate(end) if len(end) else end
    out = acc["end_ns"].to_numpy(np.int64).copy()
    lo = np.searchsorted(launch, acc["start_ns"].to_numpy(), "left")
    hi = np.searchsorted(launch, acc["end_ns"].to_numpy(), "right")
    for i, (a, b) in enumerate(zip(lo, hi, strict=True)):
        if b > a:
            out[i] = end[a:b].max()
        elif b > 0:
            out[i] = before[b - 1]
    return out


def _sizes_from_comm(n: int, grad_comm: pd.DataFrame) -> np.ndarray:
    total = float(grad_comm["bytes"].clip(lower=0).sum())
    return np.full(n, total / n if n else 0.0)


def _overlap(comm: iv.Intervals, lo: int, hi: int) -> float:
    return float(iv.length(iv.clip(comm, lo, hi))) if hi > lo else 0.0


def _sync(
    host: pd.DataFrame,
    grad_comm: pd.DataFrame,
    lo: int,
    hi: int,
    comm: iv.Intervals,
    gpu: bool,
) -> tuple[float, int, float]:
    """Host time, waited collectives and averaged bytes of the sync phase [lo, hi)."""
    if hi <= lo:
        return 0.0, 0, 0.0
    host_ns = float(hi - lo) - _overlap(comm, lo, hi)
    ends = grad_comm["end_ns"].to_numpy()
    waited = int(((ends > lo) & (ends <= hi)).sum())
    divs = host.loc[(host["name"] == DIV_OP).to_numpy()]
    divs = divs.loc[((divs["start_ns"] >= lo) & (divs["start_ns"] < hi)).to_numpy()]
    nbytes = shape_bytes(divs["input_dims"], divs["input_type"])
    return host_ns, waited, float(nbytes[nbytes > 0].sum())


def _copy_rate(host: pd.DataFrame) -> float | None:
    """ns per byte of in-place averaging (div_ reads and writes each byte once, as a copy
    does), from the div_ operators with known shapes; None when there are none."""
    divs = host.loc[(host["name"] == DIV_OP).to_numpy()]
    nbytes = shape_bytes(divs["input_dims"], divs["input_type"])
    keep = nbytes > 0
    if not keep.any():
        return None
    duration = (divs["end_ns"] - divs["start_ns"]).to_numpy()[keep]
    return float(duration.sum() / nbytes[keep].sum())


def _launch_ns(host: pd.DataFrame) -> float:
    """Median host time of one all-reduce call (c10d::allreduce_) on CPU traces."""
    calls = host.loc[host["name"].astype(str).str.match(COLLECTIVE_CALL).to_numpy()]
    if len(calls) == 0:
        return 0.0
    return float(np.median((calls["end_ns"] - calls["start_ns"]).to_numpy()))
