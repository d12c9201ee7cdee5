"""tracekit's command line. It parses, validates and calls the library; nothing more.

Exit status: 0 all inputs analysed; 1 partial: some inputs unusable or without communication
(the rest is still reported), or for ``compare`` B slower beyond ``--fail-above``; 2 nothing
usable, incomplete input for ``compare``, a usage error, or output that could not be written;
3 an internal error (a bug in tracekit: one line, the traceback with ``--debug``).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from tracekit.config import AnalysisConfig
from tracekit.errors import InternalError, TracekitError
from tracekit.selection import Selection

if TYPE_CHECKING:
    from tracekit.analysis import Analysis, TaskDone

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK, EXIT_PARTIAL, EXIT_FAILED, EXIT_INTERNAL = 0, 1, 2, 3
DEBUG_HINT = "run with --debug for the traceback"


def _error(message: str) -> None:
    click.echo(f"tracekit: error: {message}", err=True)


# --- the options every analysing command shares --------------------------------------------


@dataclass(frozen=True)
class Options:
    """The shared options of a command, parsed once (see ``shared_options``)."""

    paths: tuple[Path, ...] = ()
    ranks: Selection | None = None
    steps: Selection | None = None
    gpu_phases: str = "projected"
    jobs: int | None = None
    parser: str = "fast"
    engine: str = "local"
    scheduler: str | None = None
    quiet: bool = False
    debug: bool = False


def _selection(ctx: click.Context, param: click.Parameter, text: str | None) -> Selection | None:
    """'0,2,5-7' -> a Selection of those ranges (never expanded)."""
    if text is None:
        return None
    try:
        return Selection.parse(text)
    except ValueError:
        raise click.BadParameter(f"expected numbers like 0,2,5-7, got {text!r}") from None


STEPS_HELP = "Steps to analyse, e.g. 5-7 (default: every step but the last, as HTA does)."


def _steps_option(help_text: str) -> Callable[[F], F]:
    return click.option("--steps", callback=_selection, help=help_text)


# Each decorator makes a fresh click parameter wherever it is applied.
_OPTIONS: dict[str, Callable[[F], F]] = {
    "paths": click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path)),
    "ranks": click.option(
        "--ranks",
        callback=_selection,
        help="Ranks to analyse, e.g. 0,1 or 0-3 (default: all).",
    ),
    "steps": _steps_option(STEPS_HELP),
    "gpu_phases": click.option(
        "--gpu-phases",
        type=click.Choice(["projected", "annotation"]),
        default="projected",
        show_default=True,
        help="GPU-side phases: host ranges projected through launch correlation, or Kineto's "
        "gpu_user_annotation (misses kernels launched by autograd's threads).",
    ),
    "jobs": click.option("--jobs", type=click.IntRange(1), help="Worker processes for parsing."),
    "parser": click.option(
        "--parser",
        type=click.Choice(["fast", "hta"]),
        default="fast",
        show_default=True,
        help="Chrome trace parser: tracekit's typed decoder, or HTA's.",
    ),
    "engine": click.option(
        "--engine",
        type=click.Choice(["local", "dask"]),
        default="local",
        show_default=True,
        help="Where files are parsed: processes on this machine, or a Dask cluster.",
    ),
    "scheduler": click.option(
        "--scheduler",
        metavar="ADDR",
        help="Dask scheduler address, e.g. tcp://host:8786 (with --engine dask).",
    ),
    "quiet": click.option("-q", "--quiet", is_flag=True, help="No progress on stderr."),
    "debug": click.option(
        "--debug", is_flag=True, help="Print the traceback of an internal error."
    ),
}
ANALYSIS = ("paths", "ranks", "steps", "gpu_phases", "jobs", "parser", "engine", "scheduler")


def shared_options(*names: str, steps_help: str = STEPS_HELP) -> Callable[[F], F]:
    """Add the options ``names`` (and always -q and --debug) to a command, hand them to it as
    one ``options: Options``, and run it under ``guarded``: the command returns its exit
    status."""
    chosen = [*names, "quiet", "debug"]

    def decorate(command: F) -> F:
        @wraps(command)
        def run(**kwargs: Any) -> None:
            given = {name: kwargs.pop(name) for name in chosen if name in kwargs}
            options = Options(**given)
            if options.scheduler is not None and options.engine != "dask":
                raise click.UsageError("--scheduler needs --engine dask")
            sys.exit(guarded(lambda: command(options=options, **kwargs), options.debug))

        wrapped: Callable[..., Any] = run
        for name in reversed(chosen):
            option = _steps_option(steps_help) if name == "steps" else _OPTIONS[name]
            wrapped = option(wrapped)
        return wrapped  # type: ignore[return-value]

    return decorate


# --- exit statuses, internal errors, a closed stdout ---------------------------------------


class OutputLost(Exception):
    """stdout was closed or full: the output could not be delivered."""


def echo(text: str, nl: bool = True) -> None:
    """Print to stdout; OutputLost when it cannot take it (a closed pipe, a full disk)."""
    try:
        click.echo(text, nl=nl)
        sys.stdout.flush()
    except OSError as e:
        raise OutputLost(e.strerror or type(e).__name__) from None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def internal_error(problem: str, trace: str, debug: bool) -> None:
    """One line for a bug in tracekit; its traceback first with --debug."""
    if debug and trace:
        click.echo(trace.rstrip(), err=True)
    _error(f"{problem}" + ("" if debug else f" ({DEBUG_HINT})"))


def guarded(command: Callable[[], int], debug: bool) -> int:
    """Run a command; its status, or the status of what stopped it: bad input 2 (one line),
    a closed or full stdout 2 (one line), an internal error 3 (one line; the traceback with
    ``debug``), Ctrl-C 130. Usage errors go to click (2)."""
    try:
        return command()
    except (click.ClickException, click.exceptions.Exit, click.Abort):
        raise
    except OutputLost as e:
        _silence_stdout()
        _error(f"cannot write the output to stdout ({e})")
        return EXIT_FAILED
    except InternalError as e:
        internal_error(str(e), e.traceback, debug)
        return EXIT_INTERNAL
    except TracekitError as e:
        _error(str(e))
        return EXIT_FAILED
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except Exception as e:  # a bug in tracekit: never shown as a traceback without --debug
        internal_error(f"internal error: {type(e).__name__}: {e}", traceback.format_exc(), debug)
        return EXIT_INTERNAL


def _report_failures(failures: Sequence[TracekitError], debug: bool) -> None:
    """One line per unusable input (internal errors with the --debug hint or traceback)."""
    for failure in failures:
        if isinstance(failure, InternalError):
            internal_error(str(failure), failure.traceback, debug)
        else:
            _error(str(failure))


def status(partial: bool, *analyses: Analysis) -> int:
    """3 when an input met an internal error, else 1 when ``partial``, else 0."""
    if any(isinstance(f, InternalError) for a in analyses for f in a.failures):
        return EXIT_INTERNAL
    return EXIT_PARTIAL if partial else EXIT_OK


# --- progress ------------------------------------------------------------------------------


def progress_line(done: int, total: int, label: str, elapsed: float, width: int = 24) -> str:
    """``[#####.....]  3/10  1.5 files/s  0:05 left  overlap rank 1``."""
    filled = int(width * done / total) if total else width
    rate = done / elapsed if elapsed > 0 else 0.0
    left = (total - done) / rate if rate > 0 else 0.0
    minutes, seconds = divmod(round(left), 60)
    return (
        f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}  {rate:.1f} files/s  "
        f"{minutes}:{seconds:02d} left  {label}"
    )


class Progress:
    """Progress of a multi-file load as one bar on stderr, redrawn in place: count, rate, time
    left, and the group and rank of the file just read."""

    def __init__(self) -> None:
        self.began = time.monotonic()

    def __call__(self, task: TaskDone) -> None:
        rank = ",".join(map(str, task.ranks)) if task.ranks else None
        group = task.group or Path(task.path).parent.name or "."
        label = f"{group} " + (f"rank {rank}" if rank is not None else Path(task.path).name)
        line = progress_line(task.done, task.total, label, time.monotonic() - self.began)
        click.echo(f"\r\033[K{line}", err=True, nl=task.done >= task.total)


def _progress(options: Options) -> Progress | None:
    """A progress bar on a terminal; nothing when stderr is not one, or with -q."""
    return Progress() if not options.quiet and sys.stderr.isatty() else None


# --- from options to an analysis -----------------------------------------------------------


def _config_from(options: Options) -> AnalysisConfig:
    """The AnalysisConfig of the options."""
    return AnalysisConfig(
        ranks=options.ranks,
        steps=options.steps,
        gpu_phases=options.gpu_phases,
        parser=options.parser,
    )


def _analyze(options: Options, paths: Sequence[Path], keep_traces: bool = False) -> Analysis:
    """The analysis of ``paths`` under ``options``: the one call into ``analyze``."""
    from tracekit.analysis import analyze

    return analyze(
        paths,
        _config_from(options),
        engine=options.engine,
        scheduler=options.scheduler,
        keep_traces=keep_traces,
        progress=_progress(options),
        jobs=options.jobs,
    )


def _analysed(options: Options, paths: Sequence[Path] | None = None, keep_traces: bool = False):
    """The analysis; unusable inputs go to stderr; exit 2 (3 for an internal error) when
    nothing is left."""
    result = _analyze(options, options.paths if paths is None else paths, keep_traces)
    _report_failures(result.failures, options.debug)
    if result.ranks.empty:
        if not result.failures:
            _error("no ranks left to analyse (check --ranks)")
        sys.exit(EXIT_INTERNAL if status(False, result) == EXIT_INTERNAL else EXIT_FAILED)
    return result


def _check_output(out: Path, force: bool) -> None:
    """The CLI's rule, and the only place it lives: never replace a file without --force."""
    if out.exists() and not force:
        raise TracekitError("already exists; pass --force to replace it", out)
    if not out.parent.is_dir():
        raise TracekitError("its directory does not exist", out)


def _wrote(output: Path, size: int, quiet: bool) -> None:
    if not quiet:
        click.echo(f"tracekit: wrote {output} ({size / 1e6:.1f} MB)", err=True)


def _flag_silent(result: Analysis) -> bool:
    """One error line per rank without communication; True when there was any."""
    silent = result.ranks[result.ranks["comm_us"] == 0]
    for source in silent["source"]:
        _error(
            f"{source}: no communication in the headline window; overlap undefined "
            "(the notes say why)"
        )
    return len(silent) > 0


_force = click.option("--force", is_flag=True, help="Replace the output file if it exists.")


def _format(choices: Sequence[str] = ("table", "json", "csv")) -> Callable[[F], F]:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(list(choices)),
        default="table",
        show_default=True,
        help="table for people (ms), json for programs, csv for spreadsheets (both µs).",
    )


def _html_output(required: bool, help_text: str) -> Callable[[F], F]:
    return click.option(
        "-o",
        "--output",
        required=required,
        type=click.Path(path_type=Path, dir_okay=False),
        help=help_text,
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tracekit")
def main() -> None:
    """Is communication hidden behind compute? Measure it in PyTorch profiler traces.

    Exit status: 0 ok; 1 partial (some inputs unusable; compare: slower beyond --fail-above);
    2 nothing usable, a usage error or unwritable output; 3 internal error (--debug shows it).
    """


@main.command()
@_format()
@shared_options(*ANALYSIS)
def analyze(options: Options, fmt: str) -> int:
    """Overlap of communication with compute per rank, step and phase.

    PATHS are trace files (.json, .json.gz, .sqlite, .nsys-rep), directories of per-rank
    traces, or run directories from run_profiles.sh (one sub-directory per variant).
    """
    from tracekit import output

    result = _analysed(options)
    render = {"table": output.to_table, "json": output.to_json, "csv": output.to_csv}[fmt]
    echo(render(result), nl=fmt == "json")
    return status(_flag_silent(result) | bool(result.failures), result)


@main.command("export-perfetto")
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
@_force
@shared_options("paths", "ranks", "parser")
def export_perfetto(options: Options, output: Path, align: bool, force: bool) -> int:
    """Every rank of one run in one trace for ui.perfetto.dev, re-readable by tracekit.

    PATHS are what analyze takes, but must hold one group of traces (one run or variant).
    Ranks become processes "rank N"; tracks show where communication overlaps compute; flow
    arrows link the same collective across ranks.
    """
    from tracekit.analysis import TaskDone
    from tracekit.export import perfetto
    from tracekit.load import load

    if not output.name.endswith((".json", ".json.gz")):
        raise click.BadParameter("must end with .json or .json.gz", param_hint="'-o/--output'")
    _check_output(output, force)
    bar = _progress(options)
    loaded = load(
        options.paths,
        _config_from(options),
        progress=(
            (
                lambda done, total, path, seconds: bar(
                    TaskDone(done, total, "", path, (), seconds, None)
                )
            )
            if bar
            else None
        ),
    )
    _report_failures(loaded.failures, options.debug)
    internal = any(isinstance(f, InternalError) for f in loaded.failures)
    if not loaded.groups:
        if not loaded.failures:
            _error("no ranks left to export (check --ranks)")
        return EXIT_INTERNAL if internal else EXIT_FAILED
    traces = perfetto.single_run(loaded.groups)
    alignment = perfetto.align_clocks(traces) if align else None
    # The CLI checked above; at the merge drop force= once write_trace no longer checks.
    perfetto.write_trace(perfetto.merged_trace(traces, alignment), output, force=True)
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
    if not options.quiet:
        click.echo(f"tracekit: wrote {output} ({len(traces)} ranks)", err=True)
    if internal:
        return EXIT_INTERNAL
    return EXIT_PARTIAL if loaded.failures else EXIT_OK


# --- HTML: timeline, report, compare -------------------------------------------------------


@main.command()
@_html_output(True, "The HTML file to write.")
@_force
@shared_options(
    *ANALYSIS,
    steps_help="Steps to show, e.g. 5-7 (default: every step but the last, as analyze uses).",
)
def timeline(options: Options, output: Path, force: bool) -> int:
    """Interactive timeline of every rank, as one self-contained HTML file.

    PATHS are what analyze takes; each group (run or variant) gets its own timeline. Lanes per
    rank: steps, phases, each compute stream (thread on CPU traces), each communication stream
    (gloo thread), where communication overlaps compute and where it is exposed. Hover for a
    kernel's name, duration, stream, step and phase; step buttons jump to one step. Shown: the
    headline steps (every step but the last) unless --steps chooses others.
    """
    from tracekit.report import html, sections

    _check_output(output, force)
    result = _analysed(options, keep_traces=True)
    page = sections.build_timeline_page(result, inputs=[str(p) for p in options.paths])
    _wrote(output, html.write_timeline(output, page), options.quiet)
    return status(bool(result.failures), result)


@main.command()
@_html_output(True, "The HTML file to write, e.g. RUN/report.html.")
@click.option("--title", help="The report's title (default: from PATHS).")
@_force
@shared_options(*ANALYSIS)
def report(options: Options, output: Path, title: str | None, force: bool) -> int:
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
    result = _analysed(options, keep_traces=True)
    page = sections.build_report(
        result,
        read_records(options.paths),
        inputs=[str(p) for p in options.paths],
        title=title,
    )
    _wrote(output, html.write_report(output, page), options.quiet)
    return status(_flag_silent(result) | bool(result.failures), result)


@main.command()
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@click.option(
    "--fail-above",
    type=click.FloatRange(min=0),
    metavar="PCT",
    help="Exit 1 when B's ms per step exceeds A's by more than PCT percent and by more than "
    "the noise (for CI).",
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
    "--allow-mismatch",
    is_flag=True,
    help="Let --fail-above gate runs made with different settings (model size, processes, "
    "steps, batch, device, torch version); they are still flagged.",
)
@_format()
@_html_output(False, "Also write an HTML report of A and B with the comparison first.")
@_force
@shared_options(*(name for name in ANALYSIS if name != "paths"))
def compare(
    options: Options,
    a: Path,
    b: Path,
    fail_above: float | None,
    noise: float,
    allow_mismatch: bool,
    fmt: str,
    output: Path | None,
    force: bool,
) -> int:
    """Compare B against A: figures side by side, differences, and a verdict.

    A and B are what analyze takes: run directories (variants with the same names are paired),
    variant directories or trace directories (compared with each other). "Slower" means more
    ms per step: the mean over the headline steps of the slowest rank's step time. Changes
    within the noise threshold count as no change. Settings from the runs' manifests (model
    size, processes, steps, batch, device, torch version) and rank counts are compared.

    Exit status (the verdict line says the same): 0 B is not slower than A by more than
    --fail-above beyond the noise (or no --fail-above); 1 it is; 2 incomplete input: a variant
    missing from or failed in either run, an unusable input, or (with --fail-above and without
    --allow-mismatch) runs made with different settings; 3 internal error.
    """
    from tracekit import compare as comparing
    from tracekit.format import dumps
    from tracekit.report.manifest import read_records

    if output is not None:
        _check_output(output, force)
    first = _analysed(options, (a,), keep_traces=output is not None)
    second = _analysed(options, (b,), keep_traces=output is not None)
    records = {side: read_records((side,)) for side in (a, b)}
    a_run, b_run = (
        comparing.run_info(side, records[side].manifest, records[side].manifest_path)
        for side in (a, b)
    )
    result = comparing.compare(
        first,
        second,
        a_label=str(a),
        b_label=str(b),
        a_run=a_run,
        b_run=b_run,
        noise_pct=noise,
        fail_above=fail_above,
        allow_mismatch=allow_mismatch,
    )
    decision = result.decision()
    if fmt == "json":
        echo(dumps(comparing.to_dict(result)))
    elif fmt == "csv":
        echo(comparing.to_csv(result), nl=False)
    else:
        echo(comparing.to_text(result), nl=False)
    if fmt != "table":
        click.echo(f"tracekit: {decision.text}", err=True)
    if output is not None:
        from tracekit.report import html, sections

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
        _wrote(output, html.write_report(output, page), options.quiet)
    internal = status(False, first, second)
    return internal if internal == EXIT_INTERNAL else decision.status


@main.command()
@_format()
@click.option(
    "--write",
    "write_to",
    type=click.Path(path_type=Path, file_okay=False),
    help="Also write summary.json and summary.csv into this directory (e.g. the run directory).",
)
@_force
@shared_options(*ANALYSIS)
def summary(options: Options, fmt: str, write_to: Path | None, force: bool) -> int:
    """Variants side by side: ms per step, compute, comm and its share, overlap %, exposed
    comm, idle, and speedup vs naive (when naive is present). Figures cover the headline
    steps; json and csv are in µs with analyze's column names."""
    from tracekit import output
    from tracekit.atomic import write_text
    from tracekit.contract import SUMMARY_CSV, SUMMARY_JSON

    render = {
        "table": output.variants_table,
        "json": output.variants_json,
        "csv": output.variants_csv,
    }[fmt]
    targets = (
        {}
        if write_to is None
        else {SUMMARY_JSON: output.variants_json, SUMMARY_CSV: output.variants_csv}
    )
    for name in targets:
        _check_output(write_to / name, force)
    result = _analysed(options)
    table = output.variants_of(result)
    echo(render(table), nl=False)
    for name, write in targets.items():
        _wrote(write_to / name, write_text(write_to / name, write(table)), options.quiet)
    return status(_flag_silent(result) | bool(result.failures), result)


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "csv"]),
    default="table",
    show_default=True,
    help="table for people, json for programs, csv for spreadsheets (times in µs).",
)
@click.option(
    "--from",
    "from_variant",
    help="In a run directory: the variant to predict from (default: naive).",
)
@click.option("--rank", type=click.IntRange(0), help="The rank to predict from (default: 0).")
@click.option(
    "--bucket-mb",
    default="1,5,25,100",
    show_default=True,
    help="Bucket sizes (MB) to predict for the bucketed variant, comma-separated.",
)
@click.option(
    "--contention",
    type=click.FloatRange(min=1.0),
    help="Slow-down of compute and communication while both run (1 = free overlap). "
    "Default: measured from the run's naive and overlap traces, else 1.5 on CPU, 1.0 on GPU.",
)
@shared_options()
def whatif(
    options: Options,
    path: Path,
    fmt: str,
    from_variant: str | None,
    rank: int | None,
    bucket_mb: str,
    contention: float | None,
) -> int:
    """Predict each DDP variant's step time from one rank's trace; recommend a bucket size.

    PATH is a trace file, a directory of per-rank traces, or a run directory from
    run_profiles.sh (predicts from its naive variant and shows the measured variants beside).
    Predicts naive, flat, overlap and bucketed (each --bucket-mb): step time, communication,
    exposed communication, overlap % and speed-up over the measured step.
    """
    from tracekit.whatif import render
    from tracekit.whatif.predict import predict_path

    try:
        sizes = tuple(float(x) for x in bucket_mb.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(
            f"expected numbers like 1,25, got {bucket_mb!r}", param_hint="--bucket-mb"
        ) from None
    if not sizes or min(sizes) <= 0:
        raise click.BadParameter("bucket sizes must be positive", param_hint="--bucket-mb")
    result = predict_path(
        path, from_variant=from_variant, rank=rank, contention=contention, bucket_mb=sizes
    )
    render_as = {"table": render.to_table, "json": render.to_json, "csv": render.to_csv}[fmt]
    echo(render_as(result), nl=fmt == "json")
    return EXIT_OK
