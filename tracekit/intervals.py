"""Interval algebra on integer nanoseconds, vectorised with NumPy.

An interval set is a pair of int64 arrays ``(starts, ends)`` of half-open ``[start, end)``
intervals. Inputs may overlap and come in any order; outputs are sorted and disjoint.

Sweep line: every start adds one and every end removes one from a running count per set, so
between two consecutive boundaries each set's count says whether that set covers the time.
"""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]

_EMPTY = np.empty(0, dtype=np.int64)


def empty() -> Intervals:
    """The empty interval set."""
    return _EMPTY, _EMPTY


def make(starts, ends) -> Intervals:
    """Interval set from array-likes, dropping empty and inverted intervals."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    return s[keep], e[keep]


def union(starts, ends) -> Intervals:
    """Sorted, disjoint union; intervals that touch are merged."""
    s, e = make(starts, ends)
    if s.size == 0:
        return empty()
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    opens = np.empty(s.size, dtype=bool)
    opens[0] = True
    opens[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(opens)
    return s[first], np.maximum.reduceat(e, first)


def length(iv: Intervals) -> int:
    """Total covered time of a disjoint set."""
    return int(np.sum(iv[1] - iv[0]))


def _sweep(a: Intervals, b: Intervals) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boundaries ``t`` and the counts of ``a`` and ``b`` on each ``[t[i], t[i+1])``."""
    na, nb = a[0].size, b[0].size
    t = np.concatenate([a[0], a[1], b[0], b[1]])
    da = np.concatenate([np.ones(na), -np.ones(na), np.zeros(2 * nb)]).astype(np.int64)
    db = np.concatenate([np.zeros(2 * na), np.ones(nb), -np.ones(nb)]).astype(np.int64)
    order = np.argsort(t, kind="stable")
    return t[order], np.cumsum(da[order]), np.cumsum(db[order])


def _pieces(t: np.ndarray, keep: np.ndarray) -> Intervals:
    """Union of the segments ``[t[i], t[i+1])`` where ``keep[i]``."""
    if t.size < 2:
        return empty()
    sel = np.flatnonzero(keep[:-1] & (t[1:] > t[:-1]))
    return union(t[sel], t[sel + 1])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Time covered by both ``a`` and ``b``."""
    t, ca, cb = _sweep(a, b)
    return _pieces(t, (ca > 0) & (cb > 0))


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """Time covered by ``a`` but not by ``b``."""
    t, ca, cb = _sweep(a, b)
    return _pieces(t, (ca > 0) & (cb == 0))


def clip(iv: Intervals, lo: int, hi: int) -> Intervals:
    """``iv`` restricted to ``[lo, hi)``."""
    return make(np.clip(iv[0], lo, hi), np.clip(iv[1], lo, hi))


def extent(iv: Intervals) -> int:
    """Time from the first start to the last end (0 when empty)."""
    return int(iv[1].max() - iv[0].min()) if iv[0].size else 0
