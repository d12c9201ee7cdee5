"""Collectives: sizes and bandwidth per type, and the same collective matched across ranks.

Matching is map-reduce shaped: each rank's task keeps only the communication rows matching
needs (``comm_rows``), and the parent pairs them across ranks (``match``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.schema import COMM, KERNEL_COLUMNS, NO_STEP, RankTrace

# nccl-tests' bus-bandwidth factor for n ranks (doc/PERFORMANCE.md in nccl-tests).
_RING = ("allreduce",)
_PARTIAL = ("allgather", "reducescatter", "alltoall", "alltoallv", "alltoallbase")
NO_PG = ""  # ``pg`` of a collective whose process group the trace does not record

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
# One row per collective instance and rank. ``pg`` is "" when matched by the fallback key
# (step, collective, seq); otherwise ``seq`` is the collective's order within its group.
MATCH_COLUMNS = (
    "step",
    "pg",
    "collective",
    "seq",
    "rank",
    "dur_us",
    "transfer_us",
    "wait_us",
    "start_skew_us",  # this rank's start minus the earliest start of the instance
    "end_skew_us",  # this rank's end minus the earliest end of the instance
)
STRAGGLER_COLUMNS = ("step", "slowest_rank", "slowest_wait_us", "max_wait_us", "collectives")
# Collective instances whose ranks disagree (never paired): one row per instance.
MISMATCH_COLUMNS = ("pg", "seq", "ranks", "problem")
# What cross-rank matching needs of a rank's comm rows (the parent holds nothing else).
COMM_ROW_COLUMNS = (
    "rank",
    "step",
    "collective",
    "start_ns",
    "end_ns",
    "bytes",
    "dtype",
    "pg",
    "pg_size",
)

MATCH_KEY = ["step", "collective", "seq"]  # the fallback key, without process groups
PG_KEY = ["pg", "seq"]  # with process groups: the group and the order within it


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

    Bandwidth is total bytes over total kernel time; it is null when any size is unknown. Bus
    bandwidth uses each collective's process-group size when known, else the world size.
    """
    k = trace.kernels.loc[mask & (trace.kernels["kind"] == COMM).to_numpy()]
    if len(k) == 0:
        return pd.DataFrame(columns=COLLECTIVE_COLUMNS)
    dur = k["end_ns"] - k["start_ns"]
    known = k["bytes"] >= 0
    size = k["bytes"].where(known, 0)
    world = trace.world_size or 1
    n = k["pg_size"].where(k["pg_size"] > 0, world).to_numpy()
    factor = np.array([bus_factor(c, int(m)) for c, m in zip(k["collective"], n, strict=True)])
    g = (
        k.assign(dur_ns=dur, known=known, size=size, bus=size * factor)
        .groupby("collective", sort=True)
        .agg(
            count=("dur_ns", "size"),
            total_ns=("dur_ns", "sum"),
            size=("size", "sum"),
            bus=("bus", "sum"),
            known=("known", "all"),
        )
        .reset_index()
    )
    total = g["total_ns"].where(g["total_ns"] > 0)
    return pd.DataFrame(
        {
            "rank": trace.rank,
            "collective": g["collective"],
            "count": g["count"],
            "bytes": g["size"].where(g["known"]),
            "total_us": g["total_ns"] / 1e3,
            "mean_us": g["total_ns"] / g["count"] / 1e3,
            "algbw_gbps": (g["size"] / total).where(g["known"]),  # B/ns = GB/s
            "busbw_gbps": (g["bus"] / total).where(g["known"]),
        },
        columns=COLLECTIVE_COLUMNS,
    )


def comm_rows(trace: RankTrace, mask: np.ndarray | None = None) -> pd.DataFrame:
    """One rank's comm rows as matching needs them (COMM_ROW_COLUMNS, start order), restricted
    to ``mask``; string columns as categories to keep the parent small."""
    k = trace.kernels
    keep = (k["kind"] == COMM).to_numpy()
    if mask is not None:
        keep = keep & mask
    rows = k.loc[keep, list(COMM_ROW_COLUMNS)].sort_values("start_ns", kind="stable")
    return rows.astype({"collective": "category", "dtype": "category", "pg": "category"})


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


@dataclass(frozen=True)
class Matched:
    """Cross-rank matching of one run: pairs, stragglers, refused instances and caveats."""

    matched: pd.DataFrame  # MATCH_COLUMNS
    stragglers: pd.DataFrame  # STRAGGLER_COLUMNS
    mismatches: pd.DataFrame  # MISMATCH_COLUMNS
    notes: tuple[str, ...]


def match(rows: pd.DataFrame, n_ranks: int) -> Matched:
    """Pair each collective instance across ranks from ``rows`` (``comm_rows`` of every rank,
    concatenated), ``n_ranks`` ranks in the run.

    Rows with a known process group are paired by (group, order within the group on each rank)
    among the group's ranks (``pg_size`` of them when known); an instance whose ranks disagree
    on collective type, size or dtype, or that more ranks claim than the group holds, is
    reported in ``mismatches`` and never paired. Rows without a group fall back to (step,
    collective, order within the step) over all ranks, and a note says so.

    A collective's shortest duration across ranks is its transfer time; the rest of each
    rank's duration is waiting for the others. In each step, the slowest rank is the one the
    others waited for: the rank that waited least.
    """
    empty = Matched(
        pd.DataFrame(columns=MATCH_COLUMNS),
        pd.DataFrame(columns=STRAGGLER_COLUMNS),
        pd.DataFrame(columns=MISMATCH_COLUMNS),
        (),
    )
    if n_ranks < 2 or rows.empty:
        return empty
    rows = rows.astype({"collective": str, "dtype": str, "pg": str}).reset_index(drop=True)
    has_pg = (rows["pg"] != NO_PG).to_numpy()
    notes: list[str] = []
    parts: list[pd.DataFrame] = []
    bad = pd.DataFrame(columns=MISMATCH_COLUMNS)
    if has_pg.any():
        keyed, bad = _by_group(rows.loc[has_pg])
        parts.append(keyed)
        if len(bad):
            notes.append(
                f"{len(bad)} collective instance(s) not matched across ranks because the "
                f"ranks disagree; first: group {bad['pg'].iloc[0]} #{bad['seq'].iloc[0]}: "
                f"{bad['problem'].iloc[0]}"
            )
    if (~has_pg).any():
        parts.append(_by_type(rows.loc[~has_pg], n_ranks))
        which = "some collectives" if has_pg.any() else "the traces"
        notes.append(
            f"no process-group information for {which}; those collectives are matched across "
            "ranks by (step, collective type, order in the step), which can pair collectives "
            "of different groups in TP/DP/pipeline runs"
        )
    parts = [p for p in parts if len(p)]
    m = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if m.empty:
        return Matched(empty.matched, empty.stragglers, bad, tuple(notes))
    # a group's instance may fall in different steps on different ranks: use the first rank's
    first = m.groupby("key")["step"].transform("first")
    m["step"] = m["step"].where(m["pg"] == NO_PG, first).astype("int64")
    return Matched(_pair_figures(m), _stragglers(m), bad.reset_index(drop=True), tuple(notes))


def _by_type(rows: pd.DataFrame, n_ranks: int) -> pd.DataFrame:
    """The fallback key (step, collective, seq), stepped rows only, keys on every rank."""
    r = rows.loc[rows["step"] != NO_STEP]
    r = r.assign(seq=r.groupby(["rank", "step", "collective"]).cumcount(), pg=NO_PG)
    on_all = r.groupby(MATCH_KEY)["rank"].transform("nunique") == n_ranks
    return r.loc[on_all].assign(key=lambda f: "t" + _key_text(f, MATCH_KEY))


def _by_group(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(group, order within the group) keys; complete and consistent instances, and the
    instances refused with the reason."""
    r = rows.assign(seq=rows.groupby(["rank", "pg"]).cumcount())
    g = r.groupby(PG_KEY, sort=False)
    members = r.groupby("pg")["rank"].transform("nunique")
    size = g["pg_size"].transform("max")
    expected = size.where(size > 0, members)
    stats = pd.DataFrame(
        {
            "n": g["rank"].transform("nunique"),
            "rows": g["rank"].transform("size"),
            "types": g["collective"].transform("nunique"),
            "sizes": g["bytes"].transform("nunique"),
            "dtypes": g["dtype"].transform("nunique"),
        }
    )
    problem = pd.Series("", index=r.index, dtype=object)
    problem = problem.mask(stats["dtypes"] > 1, "dtype differs across ranks")
    problem = problem.mask(stats["sizes"] > 1, "size differs across ranks")
    problem = problem.mask(stats["types"] > 1, "collective type differs across ranks")
    problem = problem.mask(
        (stats["n"] > expected) | (stats["rows"] > stats["n"]),
        "more ranks than the group holds (group names repeat across groups?)",
    )
    refused = r.loc[problem != ""].assign(problem=problem[problem != ""])
    ok = r.loc[(problem == "") & (stats["n"] == expected)]
    bad = (
        refused.groupby(PG_KEY, sort=False)
        .agg(ranks=("rank", _rank_list), problem=("problem", "first"))
        .reset_index()
        .loc[:, list(MISMATCH_COLUMNS)]
    )
    return ok.assign(key=lambda f: "g" + _key_text(f, PG_KEY)), bad


def _rank_list(ranks: pd.Series) -> str:
    return ",".join(map(str, sorted(set(ranks))))


def _key_text(frame: pd.DataFrame, columns: list[str]) -> pd.Series:
    text = frame[columns[0]].astype(str)
    for c in columns[1:]:
        text = text + "\x1f" + frame[c].astype(str)
    return text


def _pair_figures(m: pd.DataFrame) -> pd.DataFrame:
    """MATCH_COLUMNS from keyed rows (``key`` names the instance)."""
    key = m.groupby("key")
    dur = m["end_ns"] - m["start_ns"]
    transfer = dur.groupby(m["key"]).transform("min")
    out = pd.DataFrame(
        {
            "step": m["step"],
            "pg": m["pg"],
            "collective": m["collective"],
            "seq": m["seq"].astype("int64"),
            "rank": m["rank"].astype("int64"),
            "dur_us": dur / 1e3,
            "transfer_us": transfer / 1e3,
            "wait_us": (dur - transfer) / 1e3,
            "start_skew_us": (m["start_ns"] - key["start_ns"].transform("min")) / 1e3,
            "end_skew_us": (m["end_ns"] - key["end_ns"].transform("min")) / 1e3,
        },
        columns=MATCH_COLUMNS,
    )
    return out.sort_values(["step", "pg", "collective", "seq", "rank"], ignore_index=True)


def _stragglers(m: pd.DataFrame) -> pd.DataFrame:
    dur = m["end_ns"] - m["start_ns"]
    m = m.assign(wait_ns=dur - dur.groupby(m["key"]).transform("min"))
    m = m.loc[m["step"] != NO_STEP]
    if m.empty:
        return pd.DataFrame(columns=STRAGGLER_COLUMNS)
    per_rank = m.groupby(["step", "rank"])["wait_ns"].sum().reset_index()
    slowest = per_rank.loc[per_rank.groupby("step")["wait_ns"].idxmin()].set_index("step")
    counts = m.drop_duplicates("key").groupby("step").size()
    return pd.DataFrame(
        {
            "step": slowest.index,
            "slowest_rank": slowest["rank"].to_numpy(),
            "slowest_wait_us": slowest["wait_ns"].to_numpy() / 1e3,
            "max_wait_us": per_rank.groupby("step")["wait_ns"].max().to_numpy() / 1e3,
            "collectives": counts.reindex(slowest.index).to_numpy(),
        },
        columns=STRAGGLER_COLUMNS,
    )
