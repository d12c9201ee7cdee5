"""The named ranges every training step is cut into, for Nsight and for torch.profiler.

One context manager, :func:`phase`, opens an NVTX range (seen by ``nsys``) and a
``torch.profiler.record_function`` range (a ``user_annotation`` event in Chrome traces) with the
same name. Every variant's step uses it, and the names come from :mod:`tracekit.contract`,
which the analysis builds its patterns from, so range names never drift:

    step#<N>            the whole training step with global index N
      forward           model forward and loss
      backward          loss.backward() (overlapping variants launch all-reduces in here)
      allreduce         gradient synchronisation left after backward (a wait, for async ones)
      optimizer         optimizer step and zero_grad
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import nvtx
from torch.profiler import record_function

from tracekit.contract import ALLREDUCE, BACKWARD, FORWARD, OPTIMIZER, PHASES, STEP_PREFIX

STEP_COLOR = "orange"  # colours from nvtx's built-in names (others need matplotlib)
PHASE_COLORS = {
    FORWARD: "green",
    BACKWARD: "blue",
    ALLREDUCE: "red",
    OPTIMIZER: "purple",
}


def step_name(step: int) -> str:
    """Range name of the step with global index ``step``."""
    return f"{STEP_PREFIX}{step}"


@contextmanager
def _range(name: str, color: str) -> Iterator[None]:
    with nvtx.annotate(name, color=color), record_function(name):
        yield


def phase(name: str) -> AbstractContextManager[None]:
    """NVTX + record_function range for one of :data:`PHASES`."""
    if name not in PHASE_COLORS:
        raise ValueError(f"unknown phase {name!r}; expected one of {PHASES}")
    return _range(name, PHASE_COLORS[name])


def step_range(step: int) -> AbstractContextManager[None]:
    """NVTX + record_function range ``step#<step>`` around one whole training step."""
    return _range(step_name(step), STEP_COLOR)
