"""run_profiles.sh's settings: validated, completed with defaults, handed back to the shell.

    python -m workloads.run_settings [--syntax-only] --variants naive,flat --steps 6 ...

Every option takes the raw text of a flag or environment variable; "" means "the default".
With ``--syntax-only`` (run by the system Python before .venv exists, standard library only)
it checks what needs no torch: numbers, switches, variant names. Without it, it also checks the
model size, the training flags (``TrainConfig.problem``, e.g. a batch that does not split over
the ranks) and the processes against the GPUs and cores, then prints shell assignments
(``name='value'`` lines) that run_profiles.sh evaluates, ``settings`` (the manifest's JSON)
among them. A bad setting gives one line, ``run_profiles: error: ...``, and exit status 2,
before any run directory exists or any variant starts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from tracekit.contract import VARIANTS

MAX_RANKS_PER_CORE = 4  # more CPU processes than this per core is refused as a mistake
NSYS_CHOICES = ("0", "1", "force")
SWITCH_CHOICES = ("0", "1")
# GPU and CPU defaults (see run_profiles.sh --help).
GPU_DEFAULTS = {"model_size": "xl", "context_length": 128, "bucket_mb": 25.0}
CPU_DEFAULTS = {"model_size": "cpu", "context_length": 64, "bucket_mb": 1.0, "nproc": 2}
DEFAULT_STEPS, DEFAULT_WARMUP = 6, 2
BATCH_PER_PROCESS = 2  # default global batch: 2 per process


class SettingError(Exception):
    """A bad setting, said in one line."""


# Option name -> how a message names the setting (flag and/or environment variable).
LABELS = {
    "variants": "--variants (TRACEKIT_VARIANTS)",
    "model_size": "--model-size (TRACEKIT_MODEL_SIZE)",
    "steps": "--steps (TRACEKIT_STEPS)",
    "warmup_steps": "TRACEKIT_WARMUP_STEPS",
    "nproc": "--nproc (TRACEKIT_NPROC)",
    "batch_size": "TRACEKIT_BATCH_SIZE",
    "context_length": "TRACEKIT_CONTEXT_LENGTH",
    "bucket_mb": "TRACEKIT_BUCKET_MB",
    "nsys": "TRACEKIT_NSYS",
    "torch_profiler": "TRACEKIT_TORCH_PROFILER",
    "nnodes": "NNODES",
    "node_rank": "NODE_RANK",
    "master_port": "MASTER_PORT",
}


@dataclass(frozen=True)
class Settings:
    """One run of run_profiles.sh, every value checked and defaulted."""

    variants: tuple[str, ...]
    model_size: str
    steps: int
    warmup_steps: int
    nproc_per_node: int
    batch_size: int
    context_length: int
    bucket_mb: float
    torch_profiler: bool
    nsys: str  # "enabled", or why Nsight Systems is skipped
    nnodes: int
    node_rank: int

    def manifest(self) -> dict:
        """The manifest's ``settings`` object."""
        return {**asdict(self), "variants": list(self.variants)}

    def shell(self) -> str:
        """``name=value`` lines for run_profiles.sh (values quoted for the shell)."""
        values = {
            "variants": ",".join(self.variants),
            "model_size": self.model_size,
            "steps": self.steps,
            "warmup": self.warmup_steps,
            "nproc": self.nproc_per_node,
            "batch": self.batch_size,
            "context": self.context_length,
            "bucket_mb": self.bucket_mb,
            "use_torch_profiler": int(self.torch_profiler),
            "nsys_reason": "" if self.nsys == "enabled" else self.nsys,
            "nnodes": self.nnodes,
            "node_rank": self.node_rank,
            "settings": json.dumps(self.manifest()),
        }
        return "".join(f"{k}={shlex.quote(str(v))}\n" for k, v in values.items())


def variant_list(text: str) -> tuple[str, ...]:
    """Comma-separated variants ("" = all), each known and named once."""
    if not text:
        return VARIANTS
    names = text.split(",")
    seen: set[str] = set()
    for name in names:
        if name not in VARIANTS:
            raise SettingError(
                f"unknown variant '{name}' in {LABELS['variants']} (choose from "
                f"{','.join(VARIANTS)})"
            )
        if name in seen:
            raise SettingError(f"variant '{name}' is named twice in {LABELS['variants']}")
        seen.add(name)
    return tuple(names)


def whole(name: str, text: str, default: int | None, minimum: int) -> int | None:
    """``text`` as a whole number >= ``minimum`` ("" gives ``default``)."""
    if text == "":
        return default
    if not (text.isascii() and text.isdigit()) or int(text) < minimum:
        raise SettingError(f"{LABELS[name]} must be a whole number >= {minimum}, got '{text}'")
    return int(text)


def positive(name: str, text: str, default: float | None) -> float | None:
    """``text`` as a finite number > 0 ("" gives ``default``)."""
    if text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise SettingError(f"{LABELS[name]} must be a positive number, got '{text}'")
    return value


def choice(name: str, text: str, choices: Sequence[str]) -> str:
    if text not in choices:
        raise SettingError(f"{LABELS[name]} must be one of {', '.join(choices)}, got '{text}'")
    return text


@dataclass(frozen=True)
class Raw:
    """The settings as parsed text (before the machine is looked at)."""

    variants: tuple[str, ...]
    model_size: str
    steps: int
    warmup_steps: int
    nproc: int | None
    batch_size: int | None
    context_length: int | None
    bucket_mb: float | None
    nsys: str
    torch_profiler: bool
    nnodes: int
    node_rank: int


def check_syntax(args: argparse.Namespace) -> Raw:
    """Everything that needs neither torch nor the machine; raises :class:`SettingError`."""
    nnodes = whole("nnodes", args.nnodes, 1, 1)
    node_rank = whole("node_rank", args.node_rank, 0, 0)
    if node_rank >= nnodes:
        raise SettingError(f"NODE_RANK {node_rank} must be below NNODES {nnodes}")
    port = whole("master_port", args.master_port, None, 1)
    if port is not None and port > 65535:
        raise SettingError(f"MASTER_PORT must be at most 65535, got {port}")
    return Raw(
        variants=variant_list(args.variants),
        model_size=args.model_size,
        steps=whole("steps", args.steps, DEFAULT_STEPS, 1),
        warmup_steps=whole("warmup_steps", args.warmup_steps, DEFAULT_WARMUP, 0),
        nproc=whole("nproc", args.nproc, None, 1),
        batch_size=whole("batch_size", args.batch_size, None, 1),
        context_length=whole("context_length", args.context_length, None, 1),
        bucket_mb=positive("bucket_mb", args.bucket_mb, None),
        nsys=choice("nsys", args.nsys or "1", NSYS_CHOICES),
        torch_profiler=choice("torch_profiler", args.torch_profiler or "1", SWITCH_CHOICES) == "1",
        nnodes=nnodes,
        node_rank=node_rank,
    )


def usable_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def check_machine(nproc: int, gpus: int, cores: int) -> None:
    """Refuse more processes than GPUs, or far more than cores."""
    if gpus and nproc > gpus:
        raise SettingError(
            f"{LABELS['nproc']} {nproc} is more than the {gpus} GPU(s) torch sees here"
        )
    if nproc > MAX_RANKS_PER_CORE * cores:
        raise SettingError(
            f"{LABELS['nproc']} {nproc} is far more than the {cores} CPU core(s) here "
            f"(at most {MAX_RANKS_PER_CORE * cores})"
        )


def nsys_reason(nsys: str, gpus: int) -> str:
    """ "enabled", or why Nsight Systems is skipped."""
    if nsys == "0":
        return "disabled (--no-nsys)"
    if shutil.which("nsys") is None:
        return "nsys is not on PATH"
    if gpus == 0 and nsys != "force":
        return "no GPU"
    return "enabled"


def complete(raw: Raw, gpus: int, cores: int) -> Settings:
    """Defaults filled in for this machine, and every check that needs torch."""
    from workloads.config import TrainConfig  # torch: only after bootstrap

    defaults = GPU_DEFAULTS if gpus else CPU_DEFAULTS
    nproc = raw.nproc or (gpus if gpus else CPU_DEFAULTS["nproc"])
    check_machine(nproc, gpus, cores)
    world_size = nproc * raw.nnodes
    settings = Settings(
        variants=raw.variants,
        model_size=raw.model_size or defaults["model_size"],
        steps=raw.steps,
        warmup_steps=raw.warmup_steps,
        nproc_per_node=nproc,
        batch_size=raw.batch_size or BATCH_PER_PROCESS * world_size,
        context_length=raw.context_length or defaults["context_length"],
        bucket_mb=raw.bucket_mb or defaults["bucket_mb"],
        torch_profiler=raw.torch_profiler,
        nsys=nsys_reason(raw.nsys, gpus),
        nnodes=raw.nnodes,
        node_rank=raw.node_rank,
    )
    for variant in settings.variants:
        config = TrainConfig(
            variant=variant,
            model_size=settings.model_size,
            steps=settings.steps,
            warmup_steps=settings.warmup_steps,
            batch_size=settings.batch_size,
            context_length=settings.context_length,
            bucket_mb=settings.bucket_mb,
        )
        message = config.problem(world_size)
        if message:
            raise SettingError(_setting_words(message))
    return settings


def _setting_words(message: str) -> str:
    """A training-flag message in run_profiles.sh's words (its flag or variable)."""
    for flag, name in (
        ("--model-size", "model_size"),
        ("--steps", "steps"),
        ("--warmup-steps", "warmup_steps"),
        ("--batch-size", "batch_size"),
        ("--context-length", "context_length"),
        ("--bucket-mb", "bucket_mb"),
    ):
        if message.startswith(flag + " "):
            return LABELS[name] + message[len(flag) :]
    return message


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="workloads.run_settings", description=__doc__.split("\n")[0])
    p.add_argument("--syntax-only", action="store_true")
    for name in LABELS:
        p.add_argument("--" + name.replace("_", "-"), default="")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        raw = check_syntax(args)
        if args.syntax_only:
            return 0
        settings = complete(raw, gpu_count(), usable_cores())
    except SettingError as error:
        print(f"run_profiles: error: {error}", file=sys.stderr)
        return 2
    sys.stdout.write(settings.shell())
    return 0


if __name__ == "__main__":
    sys.exit(main())
