"""Collective names and message sizes from the arguments traces record."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

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


# Collectives named by other communication kernels (see Classification.comm), in the order
# tried: 'two_shot_all_reduce_kernel' -> allreduce, 'multimem_all_gather_kernel' -> allgather.
_NAMED = (
    ("reducescatter", re.compile(r"(?i)reduce_?scatter")),
    ("allreduce", re.compile(r"(?i)all_?reduce|cross_device_reduce|quickreduce")),
    ("allgather", re.compile(r"(?i)all_?gather")),
    ("alltoall", re.compile(r"(?i)all_?to_?all|deep_ep::\w+::(dispatch|combine)")),
    ("broadcast", re.compile(r"(?i)broadcast")),
    ("sendrecv", re.compile(r"^Memcpy PtoP|(?i:nvshmemx?_\w*(put|get))")),
)


def from_kernel_name(names: pd.Series) -> pd.Series:
    """Collective named inside communication kernel names: NCCL/RCCL's
    ('ncclDevKernel_AllReduce_...'), then the words of other libraries' kernels; '' unknown."""
    codes, distinct = pd.factorize(names.astype(str), use_na_sentinel=False)  # once per name
    text = pd.Series(distinct, dtype=object)
    found = text.str.extract(_KERNEL_COLLECTIVE, expand=False).fillna("").map(normalize)
    rest = found == ""
    if rest.any():
        found[rest] = text[rest].map(_named)
    return pd.Series(found.to_numpy(dtype=object)[codes], index=names.index)


def _named(name: str) -> str:
    return next((label for label, rx in _NAMED if rx.search(name)), "")


def message_bytes(in_nelems: pd.Series, out_nelems: pd.Series, dtypes: pd.Series) -> np.ndarray:
    """max(in, out) elements times the element size, as nccl-tests sizes; -1 when unknown."""

    def count(x: pd.Series) -> np.ndarray:
        return pd.to_numeric(x, errors="coerce").fillna(-1).to_numpy(np.int64)

    n = np.maximum(count(in_nelems), count(out_nelems))
    size = each(dtype_bytes, dtypes.to_numpy(dtype=object)).astype(np.int64)
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


def dtype_name(dtype: object) -> str:
    """'Float', 'c10::BFloat16', 'torch.float16' -> 'float', 'bfloat16', 'float16'; '' unknown."""
    if not isinstance(dtype, str):
        return ""
    return dtype.strip().lower().removeprefix("c10::").removeprefix("torch.")


def group_label(name: object, description: object) -> str:
    """A process group as tracekit names it: Kineto's 'Process Group Name' (the same on every
    rank of the group), with its description when it has a meaningful one: '3 (tp_group)'."""
    name = name.strip() if isinstance(name, str) else ""
    description = description.strip() if isinstance(description, str) else ""
    if description in ("", "undefined") or description == name:
        return name or ("" if description == "undefined" else description)
    return f"{name} ({description})" if name else description


Groups = dict[str, tuple[int, str]]  # distributedInfo.pg_config: name -> (size, description)


def group_size(size: object, ranks: object, name: object, groups: Groups) -> int:
    """Ranks in a collective's group: 'Group size', else the length of 'Process Group Ranks'
    (a list, or Kineto's string '[0, 1]'), else distributedInfo.pg_config; -1 unknown."""
    if type(size) is int and 0 < size < 2**31:
        return size
    if isinstance(ranks, list) and ranks:
        return len(ranks)
    if isinstance(ranks, str):
        inner = ranks.strip().removeprefix("[").removesuffix("]").strip()
        if inner and "..." not in inner:  # a truncated list says nothing about the size
            return inner.count(",") + 1
    if isinstance(name, str) and name in groups:
        return groups[name][0]
    return -1


def describe(args: pd.DataFrame, groups: Groups) -> dict[str, np.ndarray]:
    """Collective, bytes, dtype, process group and its size from communication arguments
    (columns collective_name, in/out_msg_nelems, msg_dtype, pg_name, pg_desc, pg_ranks,
    group_size); runs once per communication row."""
    names = args["collective_name"].to_numpy(dtype=object)
    pg_name = args["pg_name"].to_numpy(dtype=object)
    pg_desc = [
        d if d or not isinstance(n, str) else groups.get(n, (0, ""))[1]
        for n, d in zip(pg_name, args["pg_desc"].to_numpy(dtype=object), strict=True)
    ]
    ranks = args["pg_ranks"].to_numpy(dtype=object)
    sizes = args["group_size"].to_numpy(dtype=object)
    return {
        "collective": each(lambda n: normalize(n) if n else "", names),
        "bytes": message_bytes(args["in_msg_nelems"], args["out_msg_nelems"], args["msg_dtype"]),
        "dtype": each(dtype_name, args["msg_dtype"].to_numpy(dtype=object)),
        "pg": each(lambda pair: group_label(*pair), zip(pg_name, pg_desc, strict=True)),
        "pg_size": np.fromiter(
            (
                group_size(int(s) if isinstance(s, (int, np.integer)) else s, r, n, groups)
                for s, r, n in zip(sizes, ranks, pg_name, strict=True)
            ),
            np.int64,
            len(args),
        ),
    }


def each(func: Callable[[Any], Any], values: Iterable[Any]) -> np.ndarray:
    """Object array of ``func`` of each (hashable) value, worked out once per distinct value:
    the arguments of thousands of collectives hold a handful of distinct values."""
    values = list(values)
    done = {v: func(v) for v in set(values)}
    out = np.empty(len(values), dtype=object)
    out[:] = [done[v] for v in values]
    return out


def fill_single_group(found: dict[str, np.ndarray], groups: Groups) -> int:
    """Rows with no process group belong to the trace's only group, when distributedInfo
    lists exactly one (pg_count 1): fill them in place; return how many were filled."""
    if len(groups) != 1:
        return 0
    ((name, (size, description)),) = groups.items()
    empty = found["pg"] == ""
    found["pg"] = np.where(empty, group_label(name, description), found["pg"])
    found["pg_size"] = np.where(empty, size, found["pg_size"])
    return int(empty.sum())
