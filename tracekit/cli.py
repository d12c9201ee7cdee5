"""tracekit's command line. It parses, validates and calls the library; nothing more.

Exit status: 0 all inputs analysed; 1 some inputs unusable or without communication (the
rest is still reported); 2 nothing usable, or a usage error.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from tracekit.config import AnalysisConfig
from tracekit.errors import TracekitError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_PARTIAL, EXIT_FAILED = 1, 2


def _error(message: str) -> None:
    click.echo(f"tracekit: error: {message}", err=True)


def _one_line_errors(command: F) -> F:
    """Turn TracekitError into one line on stderr and exit 2, never a traceback."""

    @wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except TracekitError as e:
            _error(str(e))
            sys.exit(EXIT_FAILED)
        except KeyboardInterrupt:
            _error("interrupted")
            sys.exit(130)

    return run  # type: ignore[return-value]


def _int_set(text: str | None, what: str) -> frozenset[int] | None:
    """'0,2,5-7' -> {0, 2, 5, 6, 7}."""
    if text is None:
        return None
    out: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise click.BadParameter(
            f"expected numbers like 0,2,5-7, got {text!r}", param_hint=what
        ) from None
    return frozenset(out)


def _progress(done: int, total: int, path: Path, seconds: float) -> None:
    click.echo(f"tracekit: read {path.name} ({done}/{total}) in {seconds:.1f} s", err=True)


def _show_progress(quiet: bool) -> bool:
    return not quiet and sys.stderr.isatty()


def _config(ranks: str | None, steps: str | None, gpu_phases: str = "projected") -> AnalysisConfig:
    return AnalysisConfig(
        ranks=_int_set(ranks, "--ranks"), steps=_int_set(steps, "--steps"), gpu_phases=gpu_phases
    )


def _check_output(out: Path, force: bool) -> None:
    if out.exists() and not force:
        raise TracekitError("already exists; pass --force to replace it", out)
    if not out.parent.is_dir():
        raise TracekitError("its directory does not exist", out)


_paths = click.argument(
    "paths", nargs=-1, required=True, type=click.Path(path_type=Path, exists=False)
)
_ranks = click.option("--ranks", help="Ranks to analyse, e.g. 0,1 or 0-3 (default: all).")
_steps = click.option(
    "--steps",
    help="Steps to analyse, e.g. 5-7 (default: every step but the last, as HTA does).",
)
_gpu_phases = click.option(
    "--gpu-phases",
    type=click.Choice(["projected", "annotation"]),
    default="projected",
    show_default=True,
    help="GPU-side phases: host ranges projected through launch correlation, or Kineto's "
    "gpu_user_annotation (misses kernels launched by autograd's threads).",
)
_quiet = click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
_force = click.option("--force", is_flag=True, help="Replace the output file if it exists.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tracekit")
def main() -> None:
    """Is communication hidden behind compute? Measure it in PyTorch profiler traces."""


@main.command()
@_paths
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "csv"]),
    default="table",
    show_default=True,
    help="table for people, json for programs, csv for spreadsheets.",
)
@_ranks
@_steps
@_gpu_phases
@click.option("--jobs", type=click.IntRange(1), help="Worker processes for parsing.")
@_quiet
@_one_line_errors
def analyze(
    paths: tuple[Path, ...],
    fmt: str,
    ranks: str | None,
    steps: str | None,
    gpu_phases: str,
    jobs: int | None,
    quiet: bool,
) -> None:
    """Overlap of communication with compute per rank, step and phase.

    PATHS are trace files (.json, .json.gz, .sqlite, .nsys-rep), directories of per-rank
    traces, or run directories from run_profiles.sh (one sub-directory per variant).
    """
    from tracekit import output
    from tracekit.analysis import analyze as run_analysis

    config = _config(ranks, steps, gpu_phases)
    progress = _progress if _show_progress(quiet) else None
    result = run_analysis(paths, config, progress=progress, jobs=jobs)
    for failure in result.failures:
        _error(str(failure))
    if result.ranks.empty:
        if not result.failures:
            _error("no ranks left to analyse (check --ranks)")
        sys.exit(EXIT_FAILED)
    render = {"table": output.to_table, "json": output.to_json, "csv": output.to_csv}[fmt]
    click.echo(render(result), nl=fmt == "json")
    silent = result.ranks[result.ranks["comm_us"] == 0]
    for source in silent["source"]:
        _error(
            f"{source}: no communication (no NCCL/RCCL kernels or gloo spans); overlap undefined"
        )
    if result.failures or len(silent):
        sys.exit(EXIT_PARTIAL)
