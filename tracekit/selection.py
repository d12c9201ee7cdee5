"""Sets of integers (steps, ranks) held as ranges, never expanded: ``--steps 1-1000000000``
costs two integers, not a billion."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Selection:
    """A union of closed integer ranges, sorted and merged."""

    spans: tuple[tuple[int, int], ...]  # (first, last) pairs, inclusive, disjoint, ascending

    @classmethod
    def parse(cls, text: str) -> Selection:
        """'0,2,5-7' -> {0, 2, 5..7}; raise ValueError on anything else."""
        spans = []
        for part in text.split(","):
            lo, sep, hi = part.strip().partition("-")
            first = int(lo)
            last = int(hi) if sep else first
            if first < 0 or last < first:
                raise ValueError(f"bad range {part.strip()!r}")
            spans.append((first, last))
        return cls.of_spans(spans)

    @classmethod
    def of(cls, values: Iterable[int]) -> Selection:
        """The selection holding exactly ``values``."""
        return cls.of_spans((int(v), int(v)) for v in values)

    @classmethod
    def of_spans(cls, spans: Iterable[tuple[int, int]]) -> Selection:
        merged: list[tuple[int, int]] = []
        for first, last in sorted(spans):
            if merged and first <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], last))
            else:
                merged.append((first, last))
        return cls(tuple(merged))

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int | np.integer):
            return False
        return bool(self.mask(np.asarray([value], dtype=np.int64))[0])

    def mask(self, values: np.ndarray) -> np.ndarray:
        """Boolean mask of ``values`` inside the selection (vectorised)."""
        values = np.asarray(values, dtype=np.int64)
        if not self.spans:
            return np.zeros(values.shape, dtype=bool)
        firsts = np.fromiter((s[0] for s in self.spans), np.int64, len(self.spans))
        lasts = np.fromiter((s[1] for s in self.spans), np.int64, len(self.spans))
        at = np.searchsorted(firsts, values, side="right") - 1
        return (at >= 0) & (values <= lasts[np.clip(at, 0, None)])

    def __str__(self) -> str:
        return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in self.spans) or "none"
