"""Settings for classification and analysis, with the defaults users get."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from tracekit.contract import PHASE_PATTERN, STEP_PATTERNS
from tracekit.selection import Selection


@dataclass(frozen=True)
class Classification:
    """Regular expressions (``re.search``) that sort activity into kinds; first match wins.

    GPU rows are tried against ``comm``, then ``memory``, then ``sync``; the rest is compute.
    """

    # Every kernel that moves data between GPUs (README: "What counts as communication").
    comm: tuple[str, ...] = (
        # NCCL and RCCL, both naming styles: ncclKernel_* (NCCL < 2.19), ncclDevKernel_*.
        r"^nccl",
        r"^rccl",
        r"ncclKernel",
        r"ncclDevKernel",
        # torch symmetric memory (torch/csrc/distributed/c10d/symm_mem): multimem_*,
        # one_shot/two_shot all-reduce (CUDA and Triton), and its other kernels by namespace.
        r"\bmultimem_\w+",
        r"(?i:\b(one|two)_?shot_?all_?reduce)",
        r"c10d::symmetric_memory::",
        # NVSHMEM and torch's NVSHMEM kernels (c10d::nvshmem_extension::*), DeepEP (over NVSHMEM).
        r"(?i:nvshmem)",
        r"\bdeep_ep::",
        # vLLM/SGLang custom all-reduce, TensorRT-LLM/FlashInfer all-reduce fusion, QuickReduce.
        r"\bcross_device_reduce_\d?stage",
        r"(?i:\ballreduce_fusion_kernel)",
        r"(?i:\bmoereduce_allreduce)",
        r"(?i:lamport\w*all_?reduce|all_?reduce\w*lamport)",
        r"\bquickreduce::",
        # Peer-to-peer copies between GPUs (Kineto names CUPTI's peer copies 'Memcpy PtoP').
        r"^Memcpy PtoP",
    )
    # Copies and fills; never compute.
    memory: tuple[str, ...] = (r"^(hip)?Memcpy", r"^(hip)?Memset", r"^dma")
    # Device, stream and event synchronisation; never compute.
    sync: tuple[str, ...] = (r"Sync", r"^Stream Wait Event", r"Synchronize")
    # CPU traces: spans on gloo's worker threads that are communication.
    cpu_comm: tuple[str, ...] = (r"^gloo:",)
    # CPU traces: host calls into the collective library; carved out of compute.
    cpu_collective_call: tuple[str, ...] = (
        r"^c10d::",
        r"^record_param_comms$",
        r"^nccl:",
        r"^gloo:",
    )


@dataclass(frozen=True)
class AnalysisConfig:
    """How ranges are recognised and which activity is analysed."""

    # How activity is sorted into compute / comm / memory / sync.
    classification: Classification = field(default_factory=Classification)
    # Step ranges, tried in order; the first pattern that matches any range defines the steps.
    # Group 1 is the step number. ProfilerStep#N comes from torch.profiler, step#N from our NVTX.
    step_patterns: tuple[str, ...] = STEP_PATTERNS
    # Phase ranges: our workloads' names, and other projects' "## name ##" annotations.
    phase_pattern: str = rf"{PHASE_PATTERN}|^## .+ ##$"
    # GPU-side phases: "projected" maps each host phase onto the GPU through the kernels
    # launched (on any thread) while it was open; "annotation" uses Kineto's
    # gpu_user_annotation, which only covers kernels launched from the annotating thread and so
    # misses backward kernels launched by autograd's threads.
    gpu_phases: str = "projected"
    # Ranks to keep (None: all). Any iterable of ints is turned into a Selection.
    ranks: Selection | None = None
    # Steps to analyse (None: HTA's window, every step but the last, for the headline and the
    # per-phase table; every step for the per-step table).
    steps: Selection | None = None
    # Chrome trace parser: "fast" (tracekit's typed decoder, tracekit.load.decode) or "hta"
    # (HolisticTraceAnalysis' parser, the reference); both give the same tables.
    parser: str = "fast"

    def __post_init__(self) -> None:
        if self.parser not in ("fast", "hta"):
            raise ValueError(f"parser must be 'fast' or 'hta', not {self.parser!r}")
        for name in ("ranks", "steps"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Selection):
                object.__setattr__(self, name, Selection.of(_ints(value)))


def _ints(values: Iterable[int]) -> Iterable[int]:
    return (int(v) for v in values)
