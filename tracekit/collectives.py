"""Collectives: sizes and bandwidth per type, and the same collective matched across ranks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from tracekit.schema import COMM, KERNEL_COLUMNS, NO_STEP, RankTrace

# nccl-tests' bus-bandwidth factor for n ranks (doc/PERFORMANCE.md in nccl-tests).
_RING = ("allreduce",)
_PARTIAL = ("allgather", "reducescatter", "alltoall", "alltoallv", "alltoallbase")

COLLECTIVE_COLUMNS = (
    "rank",
    "collective",
    "count",
    "bytes",
    "total_us",
    "mean_us",
    "algbw_gbps",
    "busbw_gbps",
)
MATCH_COLUMNS = ("step", "collective", "seq", "rank", "dur_us", "transfer_us", "wait_us")
STRAGGLER_COLUMNS = ("step", "slowest_rank", "slowest_wait_us", "max_wait_us", "collectives")


def bus_factor(collective: str, n: int) -> float:
    """Bus bandwidth / algorithm bandwidth for ``collective`` over ``n`` ranks."""
    if n <= 1:
        return 1.0
    if collective in _RING:
        return 2.0 * (n - 1) / n
    if collective in _PARTIAL:
        return (n - 1) / n
    return 1.0


def collective_table(trace: RankTrace, mask: np.ndarray) -> pd.DataFrame:
    """Per collective type on one rank: count, bytes, time and bandwidth (masked rows only).

    Bandwidth is total bytes over total kernel time; it is null when any size is unknown.
    """
    k = trace.kernels.loc[mask & (trace.kernels["kind"] == COMM).to_numpy()]
    if len(k) == 0:
        return pd.DataFrame(columns=COLLECTIVE_COLUMNS)
    dur = k["end_ns"] - k["start_ns"]
    known = k["bytes"] >= 0
    g = (
        k.assign(dur_ns=dur, known=known, size=k["bytes"].where(known, 0))
        .groupby("collective", sort=True)
        .agg(
            count=("dur_ns", "size"),
            total_ns=("dur_ns", "sum"),
            size=("size", "sum"),
            known=("known", "all"),
        )
        .reset_index()
    )
    n = trace.world_size or 1
    algbw = (g["size"] / g["total_ns"].where(g["total_ns"] > 0)).where(g["known"])  # B/ns = GB/s
    factor = g["collective"].map(lambda c: bus_factor(c, n))
    return pd.DataFrame(
        {
            "rank": trace.rank,
            "collective": g["collective"],
            "count": g["count"],
            "bytes": g["size"].where(g["known"]),
            "total_us": g["total_ns"] / 1e3,
            "mean_us": g["total_ns"] / g["count"] / 1e3,
            "algbw_gbps": algbw,
            "busbw_gbps": algbw * factor,
        },
        columns=COLLECTIVE_COLUMNS,
    )


MATCH_KEY = ["step", "collective", "seq"]


def keyed_comm(
    traces: Sequence[RankTrace],
    masks: Sequence[np.ndarray] | None = None,
    *,
    stepped_only: bool = False,
) -> pd.DataFrame:
    """Comm rows of every rank (all kernel columns) keyed by MATCH_KEY: ``seq`` counts each
    collective type within its step in start order (outside every step: within the trace).
    Only keys present on every rank are kept; sorted by key, then rank. ``masks`` restrict
    each trace's rows; ``stepped_only`` drops rows outside every step before counting."""
    frames = []
    for i, trace in enumerate(traces):
        k = trace.kernels
        keep = (k["kind"] == COMM).to_numpy()
        if masks is not None:
            keep = keep & masks[i]
        if stepped_only:
            keep = keep & (k["step"] != NO_STEP).to_numpy()
        k = k.loc[keep].sort_values("start_ns", kind="stable")
        frames.append(k.assign(seq=k.groupby(["step", "collective"]).cumcount()))
    comm = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if comm.empty:
        return pd.DataFrame(columns=[*KERNEL_COLUMNS, "seq"])
    on_all = comm.groupby(MATCH_KEY)["rank"].transform("nunique") == len(traces)
    return comm.loc[on_all].sort_values([*MATCH_KEY, "rank"], ignore_index=True)


def match_across_ranks(
    traces: Sequence[RankTrace], masks: Sequence[np.ndarray]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pair the k-th collective of each type in each step across ranks.

    A collective's shortest duration across ranks is its transfer time; the rest of each
    rank's duration is waiting for the others. In each step, the slowest rank is the one the
    others waited for: the rank that waited least.
    """
    empty = pd.DataFrame(columns=MATCH_COLUMNS), pd.DataFrame(columns=STRAGGLER_COLUMNS)
    if len(traces) < 2:
        return empty
    m = keyed_comm(traces, masks, stepped_only=True)
    if m.empty:
        return empty
    m["dur_ns"] = m["end_ns"] - m["start_ns"]
    m["transfer_ns"] = m.groupby(MATCH_KEY)["dur_ns"].transform("min")
    m["wait_ns"] = m["dur_ns"] - m["transfer_ns"]
    matched = pd.DataFrame(
        {
            "step": m["step"],
            "collective": m["collective"],
            "seq": m["seq"],
            "rank": m["rank"],
            "dur_us": m["dur_ns"] / 1e3,
            "transfer_us": m["transfer_ns"] / 1e3,
            "wait_us": m["wait_ns"] / 1e3,
        }
    ).sort_values(["step", "collective", "seq", "rank"], ignore_index=True)

    per_rank = m.groupby(["step", "rank"])["wait_ns"].sum().reset_index()
    slowest = per_rank.loc[per_rank.groupby("step")["wait_ns"].idxmin()].set_index("step")
    counts = m.drop_duplicates(MATCH_KEY).groupby("step").size()
    stragglers = pd.DataFrame(
        {
            "step": slowest.index,
            "slowest_rank": slowest["rank"].to_numpy(),
            "slowest_wait_us": slowest["wait_ns"].to_numpy() / 1e3,
            "max_wait_us": per_rank.groupby("step")["wait_ns"].max().to_numpy() / 1e3,
            "collectives": counts.reindex(slowest.index).to_numpy(),
        },
        columns=STRAGGLER_COLUMNS,
    )
    return matched, stragglers
