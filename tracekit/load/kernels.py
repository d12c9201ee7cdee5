"""The kernel table of a GPU trace, assembled the same way by every loader."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.load.ranges import assign
from tracekit.schema import KERNEL_COLUMNS, UNKNOWN, conform


def gpu_kernel_table(
    rank: int,
    rows: pd.DataFrame,
    *,
    kind: pd.Categorical,
    launch: np.ndarray,
    steps: pd.DataFrame,
    collective: np.ndarray,
    nbytes: np.ndarray,
    dtype: np.ndarray | str = "",
    pg: np.ndarray | str = "",
    pg_size: np.ndarray | int = UNKNOWN,
) -> pd.DataFrame:
    """``rows`` (device, stream, name, start_ns, end_ns, correlation) with what the loader
    worked out about them, as the kernel table sorted by start. A row's step comes from its
    launch time, or from its start time when the launch is unknown (``launch`` < 0)."""
    start = rows["start_ns"].to_numpy()
    kernels = pd.DataFrame(
        {
            "rank": rank,
            "device": rows["device"].to_numpy(),
            "stream": rows["stream"].to_numpy(),
            "name": rows["name"].to_numpy(),
            "kind": kind,
            "start_ns": start,
            "end_ns": rows["end_ns"].to_numpy(),
            "launch_ns": launch,
            "step": assign(np.where(launch >= 0, launch, start), steps),
            "correlation": rows["correlation"].to_numpy(),
            "collective": collective,
            "bytes": nbytes,
            "dtype": dtype,
            "pg": pg,
            "pg_size": pg_size,
        }
    )
    return conform(kernels.sort_values("start_ns", kind="stable"), KERNEL_COLUMNS)
