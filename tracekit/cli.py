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
from tracekit.selection import Selection

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


def _int_set(text: str | None, what: str) -> Selection | None:
    """'0,2,5-7' -> a Selection of those ranges (never expanded)."""
    if text is None:
        return None
    try:
        return Selection.parse(text)
    except ValueError:
        raise click.BadParameter(
            f"expected numbers like 0,2,5-7, got {text!r}", param_hint=what
        ) from None


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


def _html_output(required: bool, help_text: str) -> Callable[[F], F]:
    return click.option(
        "-o",
        "--output",
        required=required,
        type=click.Path(path_type=Path, dir_okay=False),
        help=help_text,
    )


_jobs = click.option("--jobs", type=click.IntRange(1), help="Worker processes for parsing.")


def _analysis_options(command: F) -> F:
    """--ranks, --steps, --gpu-phases, --jobs and -q: what every analysing command takes."""
    for option in reversed((_ranks, _steps, _gpu_phases, _jobs, _quiet)):
        command = option(command)
    return command


def _analysed(paths: tuple[Path, ...], config: AnalysisConfig, jobs: int | None, quiet: bool):
    """The analysis of ``paths``; unusable inputs go to stderr; exit 2 when nothing is left."""
    from tracekit.analysis import analyze as run_analysis

    progress = _progress if _show_progress(quiet) else None
    result = run_analysis(paths, config, progress=progress, jobs=jobs)
    for failure in result.failures:
        _error(str(failure))
    if result.ranks.empty:
        if not result.failures:
            _error("no ranks left to analyse (check --ranks)")
        sys.exit(EXIT_FAILED)
    return result


def _wrote(output: Path, size: int, quiet: bool) -> None:
    if not quiet:
        click.echo(f"tracekit: wrote {output} ({size / 1e6:.1f} MB)", err=True)


def _flag_silent(result) -> bool:
    """One error line per rank without communication; True when there was any."""
    silent = result.ranks[result.ranks["comm_us"] == 0]
    for source in silent["source"]:
        _error(
            f"{source}: no communication (no NCCL/RCCL kernels or gloo spans); overlap undefined"
        )
    return len(silent) > 0


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
@_analysis_options
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

    result = _analysed(paths, _config(ranks, steps, gpu_phases), jobs, quiet)
    render = {"table": output.to_table, "json": output.to_json, "csv": output.to_csv}[fmt]
    click.echo(render(result), nl=fmt == "json")
    if _flag_silent(result) | bool(result.failures):
        sys.exit(EXIT_PARTIAL)


@main.command("export-perfetto")
@_paths
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="The merged trace to write (.json or .json.gz).",
)
@click.option(
    "--align",
    is_flag=True,
    help="Move each rank's clock so that matched collectives end together; the offsets go to "
    "stderr and into the file.",
)
@_ranks
@_force
@_quiet
@_one_line_errors
def export_perfetto(
    paths: tuple[Path, ...], output: Path, align: bool, ranks: str | None, force: bool, quiet: bool
) -> None:
    """Every rank of one run in one trace for ui.perfetto.dev, re-readable by tracekit.

    PATHS are what analyze takes, but must hold one group of traces (one run or variant).
    Ranks become processes "rank N"; tracks show where communication overlaps compute; flow
    arrows link the same collective across ranks.
    """
    from tracekit.export import perfetto
    from tracekit.load import load

    if not output.name.endswith((".json", ".json.gz")):
        raise click.BadParameter("must end with .json or .json.gz", param_hint="'-o/--output'")
    _check_output(output, force)
    progress = _progress if _show_progress(quiet) else None
    loaded = load(paths, _config(ranks, None), progress=progress)
    for failure in loaded.failures:
        _error(str(failure))
    if not loaded.groups:
        if not loaded.failures:
            _error("no ranks left to export (check --ranks)")
        sys.exit(EXIT_FAILED)
    traces = perfetto.single_run(loaded.groups)
    alignment = perfetto.align_clocks(traces) if align else None
    perfetto.write_trace(perfetto.merged_trace(traces, alignment), output, force=force)
    if alignment is not None:
        if len(traces) < 2:
            _error("--align: only one rank; nothing to align")
        elif alignment.matched == 0:
            _error("--align: no collective matched on every rank; clocks left as recorded")
        for rank, moved in alignment.offsets_ns.items():
            click.echo(
                f"tracekit: rank {rank}: clock moved by {moved / 1e3:+.3f} µs "
                f"({alignment.matched} collectives matched, reference rank "
                f"{alignment.reference})",
                err=True,
            )
    if not quiet:
        click.echo(f"tracekit: wrote {output} ({len(traces)} ranks)", err=True)
    if loaded.failures:
        sys.exit(EXIT_PARTIAL)


# --- HTML: timeline, report, compare -------------------------------------------------------


@main.command()
@_paths
@_html_output(True, "The HTML file to write.")
@_analysis_options
@_force
@_one_line_errors
def timeline(
    paths: tuple[Path, ...],
    output: Path,
    ranks: str | None,
    steps: str | None,
    gpu_phases: str,
    jobs: int | None,
    force: bool,
    quiet: bool,
) -> None:
    """Interactive timeline of every rank, as one self-contained HTML file.

    PATHS are what analyze takes; each group (run or variant) gets its own timeline. Lanes per
    rank: steps, phases, each compute stream (thread on CPU traces), each communication stream
    (gloo thread), and when communication overlaps compute. Hover for a kernel's name,
    duration, stream, step and phase; step buttons jump to one step. --steps shows only those.
    """
    from tracekit.report import html, sections

    _check_output(output, force)
    config = _config(ranks, steps, gpu_phases)
    result = _analysed(paths, config, jobs, quiet)
    page = sections.build_timeline_page(result, inputs=[str(p) for p in paths])
    _wrote(output, html.write_timeline(output, page), quiet)
    if result.failures:
        sys.exit(EXIT_PARTIAL)


@main.command()
@_paths
@_html_output(True, "The HTML file to write, e.g. RUN/report.html.")
@click.option("--title", help="The report's title (default: from PATHS).")
@_analysis_options
@_force
@_one_line_errors
def report(
    paths: tuple[Path, ...],
    output: Path,
    title: str | None,
    ranks: str | None,
    steps: str | None,
    gpu_phases: str,
    jobs: int | None,
    force: bool,
    quiet: bool,
) -> None:
    """One self-contained HTML report of a run's variants, figures beside pictures.

    PATHS: a run directory from run_profiles.sh (every variant), or one or more trace
    directories (one variant each). Per variant: ms per step, comm share, overlap and speedup
    vs naive; where step time goes; phases; collectives; one step's timeline per rank, every
    variant on the same scale; the run's manifest when present; how the figures are defined.
    Exit 1 when some input is unusable or a rank has no communication (still written).
    """
    from tracekit.report import html, sections
    from tracekit.report.manifest import read_records

    _check_output(output, force)
    config = _config(ranks, steps, gpu_phases)
    result = _analysed(paths, config, jobs, quiet)
    page = sections.build_report(
        result,
        read_records(paths),
        inputs=[str(p) for p in paths],
        title=title,
    )
    _wrote(output, html.write_report(output, page), quiet)
    if _flag_silent(result) | bool(result.failures):
        sys.exit(EXIT_PARTIAL)


@main.command()
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@click.option(
    "--fail-above",
    type=click.FloatRange(min=0),
    metavar="PCT",
    help="Exit 1 when B's ms per step exceeds A's by more than PCT percent (for CI).",
)
@click.option(
    "--noise",
    type=click.FloatRange(min=0),
    default=2.0,
    show_default=True,
    metavar="PCT",
    help="Changes within ±PCT% (or twice the standard error, if larger) are noise.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json for programs.",
)
@_html_output(False, "Also write an HTML report of A and B with the comparison first.")
@_analysis_options
@_force
@_one_line_errors
def compare(
    a: Path,
    b: Path,
    fail_above: float | None,
    noise: float,
    fmt: str,
    output: Path | None,
    ranks: str | None,
    steps: str | None,
    gpu_phases: str,
    jobs: int | None,
    force: bool,
    quiet: bool,
) -> None:
    """Compare B against A: figures side by side, differences, and a verdict.

    A and B are what analyze takes: run directories (variants with the same names are paired),
    variant directories or trace directories (compared with each other). "Slower" means more
    ms per step: the mean over the headline steps of the slowest rank's step time. Changes
    within the noise threshold count as no change.

    Exit status: 0 B is not slower than A by more than --fail-above (or no --fail-above);
    1 B is slower than A by more than --fail-above PCT; 2 unusable or incomplete input.
    """
    import json

    from tracekit import compare as comparing

    if output is not None:
        _check_output(output, force)
    config = _config(ranks, steps, gpu_phases)
    first = _analysed((a,), config, jobs, quiet)
    second = _analysed((b,), config, jobs, quiet)
    if first.failures or second.failures:
        _error("not comparing runs with unusable inputs")
        sys.exit(EXIT_FAILED)
    result = comparing.compare(
        first,
        second,
        a_label=str(a),
        b_label=str(b),
        steps=config.steps,
        noise_pct=noise,
        fail_above=fail_above,
    )
    if fmt == "json":
        click.echo(json.dumps(comparing.to_dict(result), indent=2, allow_nan=False))
    else:
        click.echo(comparing.to_text(result), nl=False)
    if output is not None:
        from tracekit.report import html, sections
        from tracekit.report.manifest import read_records

        both = comparing.combine(
            [comparing.relabel(first, "A · "), comparing.relabel(second, "B · ")]
        )
        page = sections.build_report(
            both,
            read_records((a, b)),
            inputs=[str(a), str(b)],
            title=f"tracekit compare: {a} → {b}",
            comparison=result,
        )
        _wrote(output, html.write_report(output, page), quiet)
    if result.regressions():
        sys.exit(EXIT_PARTIAL)


@main.command()
@_paths
@click.option(
    "--write",
    "write_to",
    type=click.Path(path_type=Path, file_okay=False),
    help="Also write summary.json and summary.csv into this directory (e.g. the run directory).",
)
@_analysis_options
@_force
@_one_line_errors
def summary(
    paths: tuple[Path, ...],
    write_to: Path | None,
    ranks: str | None,
    steps: str | None,
    gpu_phases: str,
    jobs: int | None,
    force: bool,
    quiet: bool,
) -> None:
    """Variants side by side: ms per step, comm ms and share, overlap %, exposed comm, idle,
    and speedup vs naive (when naive is present). Figures cover the headline steps."""
    from tracekit import output
    from tracekit.atomic import write_text
    from tracekit.report.summary import variant_summary
    from tracekit.rundir import SUMMARY_CSV, SUMMARY_JSON

    config = _config(ranks, steps, gpu_phases)
    targets = (
        {}
        if write_to is None
        else {SUMMARY_JSON: output.variants_json, SUMMARY_CSV: output.variants_csv}
    )
    for name in targets:
        _check_output(write_to / name, force)
    result = _analysed(paths, config, jobs, quiet)
    table = variant_summary(result, steps=config.steps)
    click.echo(output.variants_table(table), nl=False)
    for name, render in targets.items():
        _wrote(write_to / name, write_text(write_to / name, render(table)), quiet)
    if _flag_silent(result) | bool(result.failures):
        sys.exit(EXIT_PARTIAL)
