"""Sort activity names into kinds with the configured patterns."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from tracekit.config import Classification
from tracekit.schema import COMM, COMPUTE, KIND_DTYPE, MEMORY, SYNC


class _AnyOf:
    """Patterns that cannot be joined into one regex (global flags): tried one by one."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = [re.compile(p) for p in patterns]

    def search(self, text: str) -> bool:
        return any(p.search(text) for p in self.patterns)


def _matcher(patterns: Sequence[str]) -> re.Pattern[str] | _AnyOf:
    if not patterns:
        return re.compile(r"(?!)")
    try:
        return re.compile("|".join(f"(?:{p})" for p in patterns))
    except re.error:
        return _AnyOf(patterns)


def matches(names: pd.Series, patterns: Sequence[str]) -> np.ndarray:
    """Boolean mask of names that match any pattern; regexes run once per distinct name."""
    codes, uniques = pd.factorize(names.astype(str), use_na_sentinel=False)
    rx = _matcher(patterns)
    hit = np.fromiter((rx.search(u) is not None for u in uniques), dtype=bool, count=len(uniques))
    return hit[codes] if len(codes) else np.zeros(0, dtype=bool)


def gpu_kinds(names: pd.Series, rules: Classification) -> pd.Categorical:
    """Kind of each GPU activity name: comm, then memory, then sync; the rest is compute."""
    kind = np.full(len(names), COMPUTE, dtype=object)
    assigned = np.zeros(len(names), dtype=bool)
    for label, patterns in ((COMM, rules.comm), (MEMORY, rules.memory), (SYNC, rules.sync)):
        hit = matches(names, patterns) & ~assigned
        kind[hit] = label
        assigned |= hit
    return pd.Categorical(kind, dtype=KIND_DTYPE)
