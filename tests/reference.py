"""An independent reference for interval figures: plain Python sort and sweep."""

from __future__ import annotations


def covered(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, merged intervals (plain Python sort and sweep)."""
    out: list[list[int]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def total(intervals: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in intervals)


def both(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Time covered by both merged lists (two-pointer sweep)."""
    i = j = time = 0
    while i < len(a) and j < len(b):
        time += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return time
