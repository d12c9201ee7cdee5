"""Interval algebra against hand-computed answers and a brute-force reference."""

import numpy as np
import pytest

from tracekit import intervals as iv


def _set(pairs):
    return iv.make([p[0] for p in pairs], [p[1] for p in pairs])


def _pairs(x):
    return list(zip(x[0].tolist(), x[1].tolist(), strict=True))


def test_union_merges_nested_overlapping_and_touching():
    u = iv.union([0, 2, 10, 20, 30], [10, 5, 15, 25, 31])
    assert _pairs(u) == [(0, 15), (20, 25), (30, 31)]


def test_union_drops_empty_intervals():
    assert _pairs(iv.union([5, 7], [5, 6])) == []


def test_intersect_and_subtract_by_hand():
    a = _set([(0, 10), (20, 30)])
    b = _set([(5, 25)])
    assert _pairs(iv.intersect(a, b)) == [(5, 10), (20, 25)]
    assert _pairs(iv.subtract(a, b)) == [(0, 5), (25, 30)]
    assert _pairs(iv.subtract(b, a)) == [(10, 20)]


def test_touching_intervals_do_not_overlap():
    a = _set([(0, 10)])
    b = _set([(10, 20)])
    assert iv.length(iv.intersect(a, b)) == 0
    assert _pairs(iv.subtract(a, b)) == [(0, 10)]


def test_unsorted_overlapping_inputs_are_accepted():
    a = iv.make([8, 0, 3], [12, 5, 9])  # covers [0, 12)
    b = iv.make([4, 4], [6, 6])
    assert _pairs(iv.intersect(a, b)) == [(4, 6)]
    assert iv.length(iv.subtract(a, b)) == 10


def test_clip_and_extent():
    a = _set([(0, 10), (20, 30)])
    assert _pairs(iv.clip(a, 5, 25)) == [(5, 10), (20, 25)]
    assert iv.extent(a) == 30
    assert iv.extent(iv.empty()) == 0


@pytest.mark.parametrize("seed", range(20))
def test_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 30))

    def rand_set():
        s = rng.integers(0, 200, n)
        return s, s + rng.integers(0, 40, n)

    a, b = rand_set(), rand_set()
    grid = np.zeros((2, 300), dtype=bool)
    for k, (s, e) in enumerate((a, b)):
        for x, y in zip(s, e, strict=True):
            grid[k, x:y] = True
    assert iv.length(iv.union(*a)) == grid[0].sum()
    assert iv.length(iv.intersect(iv.make(*a), iv.make(*b))) == (grid[0] & grid[1]).sum()
    assert iv.length(iv.subtract(iv.make(*a), iv.make(*b))) == (grid[0] & ~grid[1]).sum()
