"""Step and phase ranges: recognise them, assign activity to steps, project them onto the GPU."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.classify import matches
from tracekit.config import AnalysisConfig
from tracekit.schema import NO_STEP, RANGE_COLUMNS, RANGE_PHASE, RANGE_STEP, conform, empty

# Step numbers of up to 18 digits always fit int64; longer ones are refused (never wrapped).
_MAX_STEP_DIGITS = 18


def host_ranges(
    events: pd.DataFrame, rank: int, config: AnalysisConfig, notes: list[str] | None = None
) -> pd.DataFrame:
    """Step and phase ranges among host events (columns name, start_ns, end_ns).

    Steps use the first of ``config.step_patterns`` that matches any event; a phase belongs to
    the step whose range holds its start. Steps whose number does not fit int64 are left out,
    and ``notes`` (when given) say so.
    """
    names = events["name"].astype(str)
    codes, distinct = pd.factorize(names, use_na_sentinel=False)  # regexes once per name
    steps = empty(RANGE_COLUMNS)
    for pattern in config.step_patterns:
        once = pd.Series(distinct).str.extract(re.compile(pattern), expand=False)
        number = once.iloc[codes].set_axis(names.index)
        hit = number.notna().to_numpy()
        digits = once.str.lstrip("0").str.len().fillna(0).to_numpy()[codes]
        too_long = hit & (digits > _MAX_STEP_DIGITS)
        if too_long.any() and notes is not None:
            example = names[too_long].iloc[0]
            shown = example if len(example) <= 60 else example[:57] + "..."
            notes.append(
                f"{int(too_long.sum())} step ranges left out: step number beyond int64 "
                f"(e.g. {shown!r})"
            )
        hit = hit & ~too_long
        if hit.any():
            found = events.loc[hit, ["name", "start_ns", "end_ns"]]
            steps = found.assign(
                rank=rank, kind=RANGE_STEP, step=number[hit].astype(np.int64), device=-1
            ).drop_duplicates("step")
            break
    is_phase = matches(names, [config.phase_pattern])
    phases = events.loc[is_phase, ["name", "start_ns", "end_ns"]]
    phases = phases.assign(
        rank=rank,
        kind=RANGE_PHASE,
        step=assign(phases["start_ns"].to_numpy(), steps),
        device=-1,
    )
    both = [f for f in (steps, phases) if len(f)]
    if not both:
        return empty(RANGE_COLUMNS)
    frame = pd.concat(both, ignore_index=True).sort_values(["start_ns", "kind"])
    return conform(frame, RANGE_COLUMNS)


def assign(times_ns: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Number of the step whose range holds each time; NO_STEP outside every step."""
    times = np.asarray(times_ns, dtype=np.int64)
    if len(steps) == 0 or times.size == 0:
        return np.full(times.size, NO_STEP, dtype=np.int64)
    order = np.argsort(steps["start_ns"].to_numpy(), kind="stable")
    start = steps["start_ns"].to_numpy(np.int64)[order]
    end = steps["end_ns"].to_numpy(np.int64)[order]
    number = steps["step"].to_numpy(np.int64)[order]
    at = np.searchsorted(start, times, side="right") - 1
    safe = np.clip(at, 0, None)
    inside = (at >= 0) & (times < end[safe])
    return np.where(inside, number[safe], NO_STEP)


def project_onto_gpu(host: pd.DataFrame, kernels: pd.DataFrame) -> pd.DataFrame:
    """GPU-side image of host ranges: from the first start to the last end of the kernels
    launched while each range was open (matched through the launch's correlation)."""
    launched = kernels[kernels["launch_ns"] >= 0].sort_values("launch_ns", kind="stable")
    if len(host) == 0 or len(launched) == 0:
        return empty(RANGE_COLUMNS)
    launch = launched["launch_ns"].to_numpy(np.int64)
    lo = np.searchsorted(launch, host["start_ns"].to_numpy(np.int64), side="left")
    hi = np.searchsorted(launch, host["end_ns"].to_numpy(np.int64), side="left")
    has = hi > lo
    # reduceat over interleaved (lo, hi) bounds reduces each slice [lo, hi) in one call;
    # a sentinel element keeps hi == len valid.
    bounds = np.column_stack([lo, hi]).ravel()
    start = np.append(launched["start_ns"].to_numpy(np.int64), 0)
    end = np.append(launched["end_ns"].to_numpy(np.int64), 0)
    first = np.minimum.reduceat(start, bounds)[::2]
    last = np.maximum.reduceat(end, bounds)[::2]
    device = np.append(launched["device"].to_numpy(np.int64), -1)[lo]
    out = host.loc[has].assign(start_ns=first[has], end_ns=last[has], device=device[has])
    return conform(out, RANGE_COLUMNS)
