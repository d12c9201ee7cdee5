"""Collective names and message sizes from the arguments traces record."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

# Element sizes for the dtype spellings that PyTorch traces use (c10 names and Python names).
_DTYPE_BYTES = {
    "float": 4, "float32": 4, "int": 4, "int32": 4, "uint32": 4,
    "double": 8, "float64": 8, "long": 8, "int64": 8, "uint64": 8, "complexfloat": 8,
    "half": 2, "float16": 2, "bfloat16": 2, "short": 2, "int16": 2, "uint16": 2,
    "byte": 1, "uint8": 1, "char": 1, "int8": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "complexdouble": 16,
}  # fmt: skip

_KERNEL_COLLECTIVE = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)")


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name such as 'Float', 'c10::BFloat16' or 'float'; -1 unknown."""
    key = str(dtype).lower().removeprefix("c10::").removeprefix("torch.").strip()
    return _DTYPE_BYTES.get(key, -1)


def normalize(name: str) -> str:
    """'all_reduce', 'AllReduce', 'allreduce_coalesced' -> 'allreduce'; '' when empty."""
    key = str(name).lower().replace("_", "").replace(" ", "")
    return key.removesuffix("coalesced").removesuffix("base")


def from_kernel_name(names: pd.Series) -> pd.Series:
    """Collective named inside NCCL/RCCL kernel names ('ncclDevKernel_AllReduce_...')."""
    found = names.astype(str).str.extract(_KERNEL_COLLECTIVE, expand=False).fillna("")
    return found.map(normalize)


def message_bytes(in_nelems: pd.Series, out_nelems: pd.Series, dtypes: pd.Series) -> np.ndarray:
    """max(in, out) elements times the element size, as nccl-tests sizes; -1 when unknown."""

    def count(x: pd.Series) -> np.ndarray:
        return pd.to_numeric(x, errors="coerce").fillna(-1).to_numpy(np.int64)

    n = np.maximum(count(in_nelems), count(out_nelems))
    size = dtypes.map(dtype_bytes).to_numpy(np.int64)
    return np.where((n > 0) & (size > 0), n * size, -1)


def shape_bytes(dims: pd.Series, types: pd.Series) -> np.ndarray:
    """Bytes of the first tensor argument from 'Input Dims' and 'Input type' (gloo spans)."""

    def one(d: object, t: object) -> int:
        if not isinstance(d, list) or not d or not isinstance(t, list) or not t:
            return -1
        shape, size = d[0], dtype_bytes(t[0])
        if not isinstance(shape, list) or size < 0 or any(isinstance(x, list) for x in shape):
            return -1
        return int(np.prod(shape, dtype=np.int64)) * size

    # Runs once per communication span (tens to thousands), not per trace event.
    return np.fromiter((one(d, t) for d, t in zip(dims, types, strict=True)), np.int64, len(dims))
