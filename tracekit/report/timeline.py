"""The timeline's data: lanes per rank and the intervals drawn in them.

Per rank, top to bottom: the step ranges, the phase ranges (one sub-lane per nesting level),
one lane per compute stream (per training thread on CPU traces), one lane per communication
stream (per gloo thread), the time when communication overlaps compute and the time when it is
exposed (both from ``tracekit.overlap.split``, the one overlap computation).

``view`` turns the intervals into the blocks to draw for a visible window: on each lane,
intervals separated by less than a pixel are merged, and a lane never gets more blocks than its
share of a fixed budget, so a zoomed-out view of 200k kernels stays a few thousand blocks. A
merged block carries how busy it is (the union of its intervals), and is drawn that much high.
The page's script (``templates/tracekit.js.j2``) does the same on every zoom.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import intervals as iv
from tracekit.overlap import phase_ranges, split
from tracekit.schema import COMM, COMPUTE, KINDS, NO_STEP, RANGE_STEP, RankTrace

# What a segment is; each is one plotly trace (one legend entry) in the figure.
STEP, PHASE, OVERLAP, EXPOSED = "step", "phase", "overlap", "exposed"
SERIES = (STEP, PHASE, *KINDS, OVERLAP, EXPOSED)
SERIES_DTYPE = pd.CategoricalDtype(SERIES)
OVERLAP_NAME = "comm ∥ compute"
EXPOSED_NAME = "exposed comm"
LANE_NAMES = {OVERLAP: "overlap", EXPOSED: "exposed comm"}
MAX_PHASE_DEPTH = 4  # deeper nesting shares the last phase sub-lane
NO_PHASE = -1

SEGMENT_COLUMNS = {
    "lane": "int64",  # index into Timeline.lanes
    "series": SERIES_DTYPE,
    "start_ns": "int64",  # relative to the lane's rank origin
    "end_ns": "int64",
    "name": "int64",  # index into Timeline.names
    "step": "int64",  # NO_STEP when none
    "phase": "int64",  # index into Timeline.names of the innermost phase; NO_PHASE when none
}
BLOCK_COLUMNS = (
    "lane",
    "series",
    "start_ns",
    "end_ns",
    "count",  # intervals merged into the block
    "busy_ns",  # time covered by them (the union of their intervals)
    "name",  # the longest one's
    "phase",  # the longest one's
    "step",  # the longest one's
    "step_lo",
    "step_hi",
)


@dataclass(frozen=True)
class Lane:
    """One row of the timeline."""

    rank: int
    role: str  # "step", "phase", "compute", "comm", "overlap" or "exposed"
    label: str  # shown on the y axis, e.g. "rank 0 · stream 7"
    stream: int  # stream or thread id of stream lanes; -1 otherwise


@dataclass(frozen=True)
class Timeline:
    """Everything a timeline figure draws; times are ns relative to each rank's origin."""

    title: str
    platform: str  # "gpu" or "cpu" (of the first rank)
    lanes: tuple[Lane, ...]
    segments: pd.DataFrame  # SEGMENT_COLUMNS, sorted by lane, series, start_ns
    names: tuple[str, ...]  # names of kernels, ranges and phases, as in the trace
    steps: pd.DataFrame  # step, start_ns, end_ns: each step's window over all ranks
    span_ns: int  # the x axis runs from 0 to span_ns
    origin: str  # what time 0 is, for the axis title


def step_windows(trace: RankTrace) -> pd.DataFrame:
    """Per step: from the earlier of its start and its first activity to the later of its end
    and its last activity (on GPUs, kernels launched in a step run after it began)."""
    steps = trace.ranges[trace.ranges["kind"] == RANGE_STEP]
    k = trace.kernels[trace.kernels["step"] != NO_STEP]
    extent = k.groupby("step").agg(first=("start_ns", "min"), last=("end_ns", "max"))
    out = steps[["step", "start_ns", "end_ns"]].drop_duplicates("step").set_index("step")
    extent = extent.astype("Int64").reindex(out.index)  # integer ns: no float rounding
    first = extent["first"].fillna(out["start_ns"]).to_numpy(np.int64)
    last = extent["last"].fillna(out["end_ns"]).to_numpy(np.int64)
    frame = pd.DataFrame(
        {
            "step": out.index.to_numpy(np.int64),
            "start_ns": np.minimum(out["start_ns"].to_numpy(np.int64), first),
            "end_ns": np.maximum(out["end_ns"].to_numpy(np.int64), last),
        }
    )
    return frame.sort_values("start_ns", ignore_index=True)


def stack_levels(start: np.ndarray, end: np.ndarray, levels: int) -> np.ndarray:
    """A sub-lane for each range, sorted by start (longest first on ties): the lowest whose
    ranges have all ended (first fit), so nested ranges stack by nesting level and ranges
    never collide within ``levels`` sub-lanes; beyond that they share the last one.

    A loop over ranges (phases number hundreds, not kernels)."""
    ends: list[int] = []
    out = np.empty(start.size, dtype=np.int64)
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist(), strict=True)):
        level = next((j for j, busy_until in enumerate(ends) if busy_until <= s), len(ends))
        level = min(level, levels - 1)
        if level == len(ends):
            ends.append(e)
        else:
            ends[level] = max(ends[level], e)
        out[i] = level
    return out


def innermost(times: np.ndarray, start: np.ndarray, end: np.ndarray, code: np.ndarray):
    """For sorted ``times``: the code of the innermost range holding each time, else -1.

    Ranges are applied in order of start (outer first on ties), each overwriting the times it
    holds, so a nested range wins inside itself. One slice per range, not per time."""
    out = np.full(times.size, -1, dtype=np.int64)
    order = np.lexsort((-end, start))
    lo = np.searchsorted(times, start[order], side="left")
    hi = np.searchsorted(times, end[order], side="left")
    for a, b, c in zip(lo.tolist(), hi.tolist(), code[order].tolist(), strict=True):
        out[a:b] = c
    return out


@dataclass(frozen=True)
class _Rank:
    """One rank's lanes and segments before names are shared out (names as strings)."""

    lanes: list[Lane]
    frame: pd.DataFrame  # lane (local), series, start_ns, end_ns, name (str), step, phase (str)


def _rank_segments(trace: RankTrace, lo: int | None, hi: int | None) -> _Rank:
    """The lanes and segments of one rank, clipped to ``[lo, hi)`` when given."""
    r = trace.rank
    k = trace.kernels
    ranges = trace.ranges[trace.ranges["kind"] == RANGE_STEP]
    phases = phase_ranges(trace)
    if lo is not None and hi is not None:
        k = k[(k["end_ns"] > lo) & (k["start_ns"] < hi)]
        ranges = ranges[(ranges["end_ns"] > lo) & (ranges["start_ns"] < hi)]
        phases = phases[(phases["end_ns"] > lo) & (phases["start_ns"] < hi)]
    clip = (lo, hi) if lo is not None and hi is not None else (None, None)

    def clipped(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        s = frame["start_ns"].to_numpy(np.int64)
        e = frame["end_ns"].to_numpy(np.int64)
        if clip[0] is None:
            return s, e
        return np.clip(s, clip[0], clip[1]), np.clip(e, clip[0], clip[1])

    lanes: list[Lane] = []
    parts: list[pd.DataFrame] = []
    who = f"rank {r}"

    # Step ranges: one lane.
    if len(ranges):
        s, e = clipped(ranges)
        lanes.append(Lane(r, STEP, f"{who} · step", -1))
        parts.append(_part(len(lanes) - 1, STEP, s, e, ranges["name"], ranges["step"]))

    # Phase ranges: one sub-lane per nesting level.
    phase_order = np.lexsort((-phases["end_ns"].to_numpy(), phases["start_ns"].to_numpy()))
    phases = phases.iloc[phase_order]
    p_start, p_end = clipped(phases)
    depth = stack_levels(p_start, p_end, MAX_PHASE_DEPTH)
    first_phase_lane = len(lanes)
    for level in range(int(depth.max()) + 1 if depth.size else 0):
        label = f"{who} · phase" + (f" (level {level + 1})" if level else "")
        lanes.append(Lane(r, PHASE, label, -1))
    if len(phases):
        part = _part(0, PHASE, p_start, p_end, phases["name"], phases["step"])
        parts.append(part.assign(lane=first_phase_lane + depth, phase=phases["name"].to_numpy()))

    # Kernels: one lane per (device, stream); communication lanes after compute lanes.
    k = k.sort_values("start_ns", kind="stable")
    k_start, k_end = clipped(k)
    phase_codes, phase_names = pd.factorize(phases["name"])
    inner = innermost(k_start, p_start, p_end, phase_codes)
    phase_of = np.append(np.asarray(phase_names, dtype=object), None)  # code -1 -> None
    kernel_phase = phase_of[inner]
    dev = k["device"].to_numpy(np.int64)
    stream = k["stream"].to_numpy(np.int64)
    is_comm = (k["kind"] == COMM).to_numpy()
    lane_keys = pd.DataFrame({"device": dev, "stream": stream, "comm": is_comm})
    lane_keys = lane_keys.groupby(["device", "stream"], sort=True)["comm"].any().reset_index()
    lane_keys = lane_keys.sort_values(["comm", "device", "stream"], kind="stable")
    cpu = trace.platform == "cpu"
    lane_of: dict[tuple[int, int], int] = {}
    for d, st, comm in lane_keys.itertuples(index=False):
        where = f"thread {st}" if cpu else f"gpu {d} stream {st}"
        role = COMM if comm else COMPUTE
        lanes.append(Lane(r, role, f"{who} · {where}" + (" · comm" if comm else ""), int(st)))
        lane_of[(int(d), int(st))] = len(lanes) - 1
    if len(k):
        index = pd.MultiIndex.from_frame(lane_keys[["device", "stream"]])
        lane_ids = pd.Series([lane_of[key] for key in index], index=index)
        kernel_lane = lane_ids.reindex(pd.MultiIndex.from_arrays([dev, stream])).to_numpy()
        parts.append(
            pd.DataFrame(
                {
                    "lane": kernel_lane,
                    "series": k["kind"].astype(str).to_numpy(),
                    "start_ns": k_start,
                    "end_ns": k_end,
                    "name": k["name"].to_numpy(),
                    "step": k["step"].to_numpy(np.int64),
                    "phase": kernel_phase,
                }
            )
        )

    # When communication overlaps compute, and when nothing hides it.
    if np.any((k["kind"] == COMM).to_numpy()):
        within = iv.make([lo], [hi]) if clip[0] is not None else None
        parts_of = split(k, within)
        windows = step_windows(trace)
        step_of = (
            windows["start_ns"].to_numpy(np.int64),
            windows["end_ns"].to_numpy(np.int64),
            windows["step"].to_numpy(np.int64),
        )
        for role, name, (start, end) in (
            (OVERLAP, OVERLAP_NAME, parts_of.both),
            (EXPOSED, EXPOSED_NAME, parts_of.exposed),
        ):
            lanes.append(Lane(r, role, f"{who} · {LANE_NAMES[role]}", -1))
            parts.append(
                pd.DataFrame(
                    {
                        "lane": len(lanes) - 1,
                        "series": role,
                        "start_ns": start,
                        "end_ns": end,
                        "name": name,
                        "step": innermost(start, *step_of),
                        "phase": phase_of[innermost(start, p_start, p_end, phase_codes)],
                    }
                )
            )
    parts = [p for p in parts if len(p)]
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["lane"])
    return _Rank(lanes, frame)


def _part(lane: int, series: str, start, end, names: pd.Series, steps: pd.Series):
    return pd.DataFrame(
        {
            "lane": lane,
            "series": series,
            "start_ns": start,
            "end_ns": end,
            "name": names.to_numpy(dtype=object),
            "step": steps.to_numpy(np.int64),
            "phase": None,
        }
    )


def build_timeline(
    traces: Sequence[RankTrace],
    *,
    windows: Mapping[int, tuple[int, int]] | None = None,
    origins: Mapping[int, int] | None = None,
    title: str = "",
    origin: str = "",
) -> Timeline:
    """The timeline of ``traces`` (one group of lanes per rank).

    ``windows``: per rank, the absolute ``[start, end)`` ns to show (activity is clipped to it);
    default everything. ``origins``: per rank, the absolute ns shown as time 0; default the
    earliest activity of any rank, so that ranks share one clock. ``origin`` says what time 0
    is, for the axis title.
    """
    windows = windows or {}
    ranks = [
        _rank_segments(t, *windows.get(t.rank, (None, None))) for t in sorted(traces, key=_rank)
    ]
    firsts = [int(r.frame["start_ns"].min()) for r in ranks if len(r.frame)]
    default_origin = min(firsts) if firsts else 0
    lanes: list[Lane] = []
    frames = []
    step_frames = []
    for trace, rank in zip(sorted(traces, key=_rank), ranks, strict=True):
        at = (origins or {}).get(trace.rank, default_origin)
        if len(rank.frame):
            frames.append(
                rank.frame.assign(
                    lane=rank.frame["lane"].to_numpy(np.int64) + len(lanes),
                    start_ns=rank.frame["start_ns"].to_numpy(np.int64) - at,
                    end_ns=rank.frame["end_ns"].to_numpy(np.int64) - at,
                )
            )
        lanes.extend(rank.lanes)
        w = step_windows(trace)
        if trace.rank in windows:
            lo, hi = windows[trace.rank]
            w = w[(w["end_ns"] > lo) & (w["start_ns"] < hi)]
        step_frames.append(w.assign(start_ns=w["start_ns"] - at, end_ns=w["end_ns"] - at))
    segments, names = _encode(frames)
    steps = (
        pd.concat(step_frames, ignore_index=True)
        .groupby("step", as_index=False)
        .agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
        .sort_values("start_ns", ignore_index=True)
    )
    span = int(segments["end_ns"].max()) if len(segments) else 0
    platform = traces[0].platform if traces else "gpu"
    return Timeline(title, platform, tuple(lanes), segments, names, steps, max(span, 0), origin)


def _rank(trace: RankTrace) -> int:
    return trace.rank


def _encode(frames: list[pd.DataFrame]) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """One segment table with names (and phase names) as codes into one shared name list."""
    if not frames:
        empty = pd.DataFrame({c: pd.Series(dtype=t) for c, t in SEGMENT_COLUMNS.items()})
        return empty, ()
    seg = pd.concat(frames, ignore_index=True)
    names = seg["name"].astype(str)
    has_phase = seg["phase"].notna().to_numpy()
    both = pd.concat([names, seg["phase"][has_phase].astype(str)], ignore_index=True)
    codes, uniques = pd.factorize(both)
    phase = np.full(len(seg), NO_PHASE, dtype=np.int64)
    phase[has_phase] = codes[len(seg) :]
    out = pd.DataFrame(
        {
            "lane": seg["lane"].to_numpy(np.int64),
            "series": pd.Categorical(seg["series"].astype(str), dtype=SERIES_DTYPE),
            "start_ns": seg["start_ns"].to_numpy(np.int64),
            "end_ns": seg["end_ns"].to_numpy(np.int64),
            "name": codes[: len(seg)].astype(np.int64),
            "step": seg["step"].to_numpy(np.int64),
            "phase": phase,
        }
    )
    out = out[out["end_ns"] >= out["start_ns"]]
    out = out.sort_values(["lane", "series", "start_ns"], kind="stable", ignore_index=True)
    return out, tuple(str(u) for u in uniques)


# --- level of detail -----------------------------------------------------------------------


def merge_runs(
    group: np.ndarray, start: np.ndarray, end: np.ndarray, gap: np.ndarray | int
) -> np.ndarray:
    """Indices of the first interval of each block. Within a group, consecutive intervals that
    are both tiny (no longer than ``gap``) merge when the later starts at most ``gap`` after
    everything before it has ended; an interval longer than ``gap`` stays alone.

    Rows must be sorted by group, then start. Vectorised: offsetting each group far beyond the
    previous one lets one running maximum of the ends serve every group at once."""
    n = start.size
    if n == 0:
        return np.empty(0, dtype=np.int64)
    gap = np.broadcast_to(np.asarray(gap, dtype=np.int64), (n,))
    room = int(max(end.max() - start.min(), 0) + gap.max() + 1)
    base = group.astype(np.int64) * room
    s = start - start.min() + base
    e = end - start.min() + base
    reach = np.maximum.accumulate(e)
    tiny = (end - start) <= gap
    new = np.ones(n, dtype=bool)
    new[1:] = (s[1:] > reach[:-1] + gap[1:]) | (group[1:] != group[:-1]) | ~tiny[1:] | ~tiny[:-1]
    return np.flatnonzero(new)


def view(
    timeline: Timeline,
    lo_ns: float | None = None,
    hi_ns: float | None = None,
    *,
    width_px: int = 1200,
    budget: int = 4000,
    min_gap_px: float = 1.0,
) -> pd.DataFrame:
    """The blocks to draw when ``[lo_ns, hi_ns]`` fills ``width_px`` pixels (BLOCK_COLUMNS).

    Runs of intervals shorter than ``min_gap_px`` pixels and less than that apart merge into
    one block (``merge_runs``). A lane and series that would still draw more than its share of
    ``budget`` blocks uses a coarser threshold ``g = 3 * window / share``: then at most
    ``window / g`` intervals are longer than g, and as many runs of shorter ones lie between
    them or between gaps wider than g, so about ``share`` blocks remain.
    Intervals within half a window either side are included, so a pan shows them at once.
    """
    seg = timeline.segments
    lo = 0.0 if lo_ns is None else float(lo_ns)
    hi = float(timeline.span_ns if hi_ns is None else hi_ns)
    width = max(hi - lo, 1.0)
    lo, hi = lo - width / 2, hi + width / 2
    visible = seg[(seg["end_ns"] >= lo) & (seg["start_ns"] <= hi)]
    if visible.empty:
        return pd.DataFrame(columns=list(BLOCK_COLUMNS))
    group = pd.factorize(
        pd.MultiIndex.from_arrays([visible["lane"], visible["series"].cat.codes]), sort=False
    )[0]
    start = visible["start_ns"].to_numpy(np.int64)
    end = visible["end_ns"].to_numpy(np.int64)
    ns_per_px = (hi - lo) / (2 * width_px)
    gap = np.full(start.size, int(np.ceil(min_gap_px * ns_per_px)), dtype=np.int64)
    first = merge_runs(group, start, end, gap)
    share = max(budget // max(int(group.max()) + 1, 1), 16)
    per_group = np.bincount(group[first], minlength=int(group.max()) + 1)
    crowded = per_group > share
    if crowded.any():
        wider = int(np.ceil(3 * (hi - lo) / share))
        gap = np.where(crowded[group], np.maximum(gap, wider), gap)
        first = merge_runs(group, start, end, gap)
    return _blocks(visible, first)


def covered(block: np.ndarray, start: np.ndarray, end: np.ndarray, first: np.ndarray):
    """Per block (rows sorted by block, then start): the length of the union of its intervals.

    Each row adds the part of it past the furthest end of the rows before it in its block;
    offsetting each block beyond the previous one lets one running maximum serve them all."""
    if start.size == 0:
        return np.empty(0, dtype=np.int64)
    room = int(end.max() - start.min()) + 1
    base = block.astype(np.int64) * room
    s, e = start - start.min() + base, end - start.min() + base
    reach = np.maximum.accumulate(e)
    before = np.empty_like(reach)
    before[0] = s[0]
    before[1:] = reach[:-1]
    before[first] = s[first]  # nothing before the first row of a block
    return np.add.reduceat(np.maximum(e - np.maximum(s, before), 0), first)


def _blocks(seg: pd.DataFrame, first: np.ndarray) -> pd.DataFrame:
    """Aggregate the runs that begin at ``first`` (sorted rows of ``seg``)."""
    start = seg["start_ns"].to_numpy(np.int64)
    end = seg["end_ns"].to_numpy(np.int64)
    dur = end - start
    n = start.size
    block = np.repeat(np.arange(first.size), np.diff(np.append(first, n)))
    longest_dur = np.maximum.reduceat(dur, first)
    candidates = np.flatnonzero(dur == longest_dur[block])
    _, at = np.unique(block[candidates], return_index=True)
    longest = candidates[at]
    step = seg["step"].to_numpy(np.int64)
    return pd.DataFrame(
        {
            "lane": seg["lane"].to_numpy()[first],
            "series": seg["series"].to_numpy()[first],
            "start_ns": start[first],
            "end_ns": np.maximum.reduceat(end, first),
            "count": np.diff(np.append(first, n)),
            "busy_ns": covered(block, start, end, first),
            "name": seg["name"].to_numpy()[longest],
            "phase": seg["phase"].to_numpy()[longest],
            "step": step[longest],
            "step_lo": np.minimum.reduceat(step, first),
            "step_hi": np.maximum.reduceat(step, first),
        },
        columns=list(BLOCK_COLUMNS),
    )
