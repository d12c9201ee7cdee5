"""Each variant's schedule for one step, replayed on two lanes: the compute thread (or stream)
and one communication lane that runs collectives first-in first-out.

While both lanes are busy, each progresses at 1 / ``contention`` of its speed (processor
sharing; 1 = communication is free to overlap, as with NCCL on its own stream; 2 = the two
share one core's worth of CPU, as gloo threads and the training thread do on a loaded CPU).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit.contract import plan_buckets
from tracekit.whatif.costmodel import CostFit
from tracekit.whatif.extract import StepInputs

MB = 1024 * 1024  # bucket sizes are MiB, as DDP's bucket_cap_mb and the workloads' --bucket-mb
_EPS = 1e-6  # ns: what counts as done


@dataclass(frozen=True)
class Variant:
    """A gradient-synchronisation scheme to predict."""

    name: str  # naive, flat, overlap or bucketed
    bucket_bytes: int | None = None  # bucketed only: the bucket cap in bytes

    @property
    def label(self) -> str:
        if self.bucket_bytes is None:
            return self.name
        return f"{self.name} {self.bucket_bytes / MB:g} MB"


@dataclass(frozen=True)
class Costs:
    """The per-operation costs a schedule is built from (ns)."""

    comm: CostFit  # all-reduce time by message size
    copy_ns_per_byte: float  # flatten / unflatten / averaging, per byte
    launch_ns: float  # host time of one collective call on the compute lane
    wait_ns: float  # host time after a wait that blocked (wake-up, bookkeeping)
    contention: float  # slow-down of each lane while both are busy (>= 1)


@dataclass(frozen=True)
class Replay:
    """One step as a variant would run it."""

    step_ns: float  # step time
    comm_ns: float  # time the communication lane is busy
    overlap_ns: float  # time communication runs while compute does
    collectives: int  # gradient collectives issued

    @property
    def exposed_ns(self) -> float:
        return self.comm_ns - self.overlap_ns

    @property
    def overlap_pct(self) -> float | None:
        return 100.0 * self.overlap_ns / self.comm_ns if self.comm_ns > 0 else None


# Compute-lane operations: ("work", ns, is_compute) | ("launch", j) | ("wait", j)
Op = tuple


def work(step: StepInputs, contention: float) -> tuple[float, np.ndarray, float, float]:
    """Compute work (ns at full speed) before backward, at each gradient-ready time, of the
    whole backward and after the sync: measured wall time less what contention cost."""
    lost = 1.0 - 1.0 / contention
    pre = step.pre_ns - step.pre_overlap_ns * lost
    ready = step.ready_ns - step.ready_overlap_ns * lost
    backward = step.backward_ns - step.backward_overlap_ns * lost
    post = step.post_ns - step.post_overlap_ns * lost
    return pre, np.maximum.accumulate(np.maximum(ready, 0.0)), max(backward, ready[-1]), post


def plan(step: StepInputs, variant: Variant, costs: Costs) -> tuple[list[Op], list[float]]:
    """The compute-lane program and the collective durations of ``variant`` for ``step``."""
    pre, ready, backward, post = work(step, costs.contention)
    sizes, copy = step.sizes, costs.copy_ns_per_byte
    ops: list[Op] = [("work", pre, True)]
    durations: list[float] = []

    def collective(nbytes: float) -> int:
        durations.append(costs.comm.time_ns(nbytes))
        return len(durations) - 1

    if variant.name in ("naive", "flat"):
        ops.append(("work", backward, True))
        if variant.name == "naive":
            for i in reversed(range(len(sizes))):  # parameter order: the reverse of ready
                j = collective(sizes[i])
                ops += [("work", costs.launch_ns, False), ("launch", j), ("wait", j)]
                ops.append(("work", copy * sizes[i], True))  # averaging
        else:
            total = float(sizes.sum())
            ops.append(("work", copy * total, True))  # flatten
            j = collective(total)
            ops += [("work", costs.launch_ns, False), ("launch", j), ("wait", j)]
            ops.append(("work", 2 * copy * total, True))  # average, unflatten
    elif variant.name in ("overlap", "bucketed"):
        groups = (
            [[i] for i in range(len(sizes))]
            if variant.name == "overlap"
            else plan_buckets(sizes, variant.bucket_bytes or 1)
        )
        flat = variant.name == "bucketed"
        done = 0.0
        issued: list[tuple[int, float]] = []
        for group in groups:
            last = group[-1]  # groups are contiguous in ready order
            ops.append(("work", ready[last] - done, True))
            done = ready[last]
            nbytes = float(sizes[group].sum())
            if flat:
                ops.append(("work", copy * nbytes, True))  # flatten into the bucket
            j = collective(nbytes)
            ops += [("work", costs.launch_ns, False), ("launch", j)]
            issued.append((j, nbytes))
        ops.append(("work", backward - done, True))
        for j, nbytes in issued:
            ops.append(("wait", j))
            ops.append(("work", copy * nbytes * (2 if flat else 1), True))  # average (+unflatten)
    else:
        raise ValueError(f"unknown variant {variant.name!r}")
    ops.append(("work", post, True))
    return ops, durations


def replay(step: StepInputs, variant: Variant, costs: Costs) -> Replay:
    """Run ``variant``'s schedule for ``step`` and measure it like tracekit measures a trace."""
    ops, durations = plan(step, variant, costs)
    return simulate(ops, durations, costs.contention, costs.wait_ns)


def simulate(ops: list[Op], durations: list[float], contention: float, wait_ns: float) -> Replay:
    """Discrete-event replay of a compute-lane program against one FIFO communication lane.

    A ``wait`` that finds its collective unfinished blocks the compute lane and costs
    ``wait_ns`` of host time once it returns.
    """
    ops = list(ops)
    done = [False] * len(durations)
    queue: list[int] = []
    t = comm_busy = overlap = 0.0
    i, left, current, comm_left = 0, None, None, 0.0
    blocked = False
    while True:
        while i < len(ops):
            op = ops[i]
            if op[0] == "launch":
                queue.append(op[1])
            elif op[0] == "wait":
                if not done[op[1]]:
                    blocked = True
                    break
                if blocked and wait_ns > 0:
                    ops.insert(i + 1, ("work", wait_ns, False))
                blocked = False
            else:
                if left is None:
                    left = float(op[1])
                if left > _EPS:
                    break
                left = None
            i += 1
        if current is None and queue:
            current = queue.pop(0)
            comm_left = durations[current]
        computing = i < len(ops) and ops[i][0] == "work"
        if not computing and current is None:
            if i < len(ops):
                raise ValueError("schedule waits for a collective that was never launched")
            break
        rate = 1.0 / contention if computing and current is not None else 1.0
        steps = [left / rate] if computing else []
        if current is not None:
            steps.append(comm_left / rate)
        dt = min(steps)
        if current is not None:
            comm_busy += dt
            if computing and ops[i][2]:
                overlap += dt
            comm_left -= dt * rate
            if comm_left <= _EPS:
                done[current], current = True, None
        if computing:
            left -= dt * rate
        t += dt
    return Replay(step_ns=t, comm_ns=comm_busy, overlap_ns=overlap, collectives=len(durations))
