"""The command line's exit statuses, internal errors, a closed or full stdout, the shared
options, progress, and `summary --format`."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.chrome_trace import gpu_trace
from tracekit import cli
from tracekit.cli import EXIT_FAILED, EXIT_INTERNAL, Options, main, progress_line
from tracekit.format import clean, number
from tracekit.selection import Selection

ANALYSING = ("analyze", "timeline", "report", "summary", "compare")


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("good")
    for rank in (0, 1):
        t = gpu_trace()
        t.rank = rank
        t.write(d / f"rank-{rank}.json")
    return d


def _tracekit(*args: str | Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *map(str, args)],
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        **kwargs,
    )


# --- internal errors -----------------------------------------------------------------------


def _boom(*args, **kwargs):
    raise RuntimeError("boom: a bug in a loader")


def test_an_internal_error_is_one_line_and_exit_3(good: Path, monkeypatch):
    """A real bug cannot be summoned on demand, so the loader function is replaced by one that
    raises RuntimeError; everything else (the CLI, load, analyze) runs as it is."""
    import tracekit.load

    monkeypatch.setattr(tracekit.load, "load_file", _boom)
    result = CliRunner().invoke(main, ["analyze", str(good), "--jobs", "1"])
    assert result.exit_code == EXIT_INTERNAL, result.output
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines and all(line.startswith("tracekit: error: ") for line in lines)
    assert "internal error" in lines[-1] and "boom" in lines[-1]
    assert "run with --debug for the traceback" in lines[-1]
    debug = CliRunner().invoke(main, ["analyze", str(good), "--jobs", "1", "--debug"])
    assert debug.exit_code == EXIT_INTERNAL
    assert "Traceback" in debug.stderr and "RuntimeError: boom" in debug.stderr
    assert "--debug for the traceback" not in debug.stderr


def test_an_unexpected_exception_in_any_command_is_exit_3(good: Path, monkeypatch):
    """As above, with the bug planted in the table renderer, after the analysis."""
    import tracekit.output

    monkeypatch.setattr(tracekit.output, "variants_table", _boom)
    result = CliRunner().invoke(main, ["summary", str(good)])
    assert result.exit_code == EXIT_INTERNAL
    assert result.stderr.strip().splitlines()[-1] == (
        "tracekit: error: internal error: RuntimeError: boom: a bug in a loader "
        "(run with --debug for the traceback)"
    )


def test_internal_errors_among_inputs_win_over_partial():
    from tracekit.analysis import analyze_traces
    from tracekit.errors import InternalError, TracekitError

    bad = InternalError("KeyError: 'x'", "r.json", traceback="Traceback ...")
    assert cli.status(True, analyze_traces({}, failures=[bad])) == EXIT_INTERNAL
    assert cli.status(True, analyze_traces({}, failures=[TracekitError("x")])) == 1
    assert cli.status(False, analyze_traces({})) == 0


def test_usage_errors_are_exit_2(good: Path):
    runner = CliRunner()
    assert runner.invoke(main, ["analyze", str(good), "--steps", "3-1"]).exit_code == 2
    assert runner.invoke(main, ["analyze", str(good), "--parser", "x"]).exit_code == 2
    proc = runner.invoke(main, ["analyze", str(good), "--scheduler", "tcp://h:8786"])
    assert proc.exit_code == 2 and "--engine dask" in proc.stderr


# --- stdout that cannot take the output ----------------------------------------------------


def _one_line(proc: subprocess.CompletedProcess, words: str) -> None:
    assert proc.returncode == EXIT_FAILED, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr


def test_a_closed_stdout_is_one_line_and_non_zero(good: Path):
    """`tracekit analyze ... | head -0`: the reading end is closed before anything is written."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = _tracekit("analyze", good, "--format", "json", stdout=write)
    finally:
        os.close(write)
    _one_line(proc, "cannot write the output to stdout")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_stdout_is_one_line_and_non_zero(good: Path):
    with open("/dev/full", "w") as full:
        proc = _tracekit("summary", good, stdout=full)
    _one_line(proc, "cannot write the output to stdout (No space left on device)")


# --- the shared options --------------------------------------------------------------------


@pytest.mark.parametrize("command", ANALYSING)
def test_every_analysing_command_takes_the_shared_options(command: str):
    text = CliRunner().invoke(main, [command, "--help"]).stdout
    for option in ("--ranks", "--steps", "--gpu-phases", "--jobs", "--parser", "--engine",
                   "--scheduler", "--quiet", "--debug"):  # fmt: skip
        assert option in text, (command, option)


def test_every_option_field_has_one_option():
    assert {f.name for f in fields(Options)} == set(cli._OPTIONS)


def test_options_reach_the_analysis_as_one_object(good: Path, monkeypatch):
    """The options a command passes to its one call into analyze (recorded, then analysed)."""
    seen: list[Options] = []
    real = cli._analyze

    def record(options, paths, keep_traces=False):
        seen.append(options)
        return real(options, paths, keep_traces)

    monkeypatch.setattr(cli, "_analyze", record)
    args = ["--steps", "1-1000000000", "--ranks", "1", "--parser", "hta", "--engine", "dask"]
    result = CliRunner().invoke(main, ["analyze", str(good), *args, "--jobs", "1", "-q"])
    assert result.exit_code == 0, result.output
    (options,) = seen
    assert options.steps == Selection(((1, 1_000_000_000),))  # a range, never expanded
    assert options.ranks == Selection(((1, 1),))
    assert (options.parser, options.engine, options.scheduler) == ("hta", "dask", None)
    assert (options.jobs, options.quiet, options.debug, options.paths) == (1, True, False, (good,))
    config = cli._config_from(options)
    assert config.steps is options.steps and config.ranks is options.ranks


# --- progress ------------------------------------------------------------------------------


def test_progress_line_has_count_rate_time_left_and_names():
    line = progress_line(3, 12, "overlap rank 1", elapsed=2.0, width=12)
    assert line == "[###.........] 3/12  1.5 files/s  0:06 left  overlap rank 1"
    assert progress_line(0, 4, "x", 0.0, width=4).startswith("[....] 0/4  0.0 files/s")


def test_progress_names_group_and_rank_on_a_terminal(capsys):
    from tracekit.analysis import TaskDone

    bar = cli.Progress()
    bar(TaskDone(1, 2, "", Path("run/overlap/rank-0.trace.json.gz"), (), 0.1, None))
    bar(TaskDone(2, 2, "naive", Path("run/naive/x.json"), (1,), 0.1, None))
    err = capsys.readouterr().err
    assert "1/2" in err and "overlap rank-0.trace.json.gz" in err
    assert "2/2" in err and "naive rank 1" in err and err.endswith("\n")


def test_no_progress_when_not_on_a_terminal(good: Path):
    proc = _tracekit("summary", good, "--jobs", "1", stdout=subprocess.PIPE)
    assert proc.returncode == 0 and proc.stderr == ""


# --- summary --format ----------------------------------------------------------------------


def test_summary_formats_use_analyze_units_and_names(run_dir: Path):
    runner = CliRunner()
    doc = json.loads(runner.invoke(main, ["summary", str(run_dir), "--format", "json"]).stdout)
    naive, overlap = doc["variants"]
    assert (naive["group"], overlap["group"]) == ("naive", "overlap")
    assert naive["step_us"] == pytest.approx(870.0) and overlap["step_us"] == pytest.approx(680)
    assert naive["exposed_comm_us"] == pytest.approx(185.0)
    assert not any(key.endswith("_ms") for key in naive)
    rows = list(
        csv.DictReader(
            io.StringIO(runner.invoke(main, ["summary", str(run_dir), "--format", "csv"]).stdout)
        )
    )
    assert [r["group"] for r in rows] == ["naive", "overlap"]
    assert float(rows[0]["step_us"]) == pytest.approx(870.0)
    table = runner.invoke(main, ["summary", str(run_dir)]).stdout
    assert "step ms" in table and "0.870" in table and "speedup vs naive" in table


def test_summary_write_refuses_to_replace_without_force(run_dir: Path, tmp_path: Path):
    runner = CliRunner()
    assert runner.invoke(main, ["summary", str(run_dir), "--write", str(tmp_path)]).exit_code == 0
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["variants"][0]["step_us"] == pytest.approx(870.0)
    again = runner.invoke(main, ["summary", str(run_dir), "--write", str(tmp_path)])
    assert again.exit_code == EXIT_FAILED and "already exists; pass --force" in again.stderr
    forced = ["summary", str(run_dir), "--write", str(tmp_path), "--force"]
    assert runner.invoke(main, forced).exit_code == 0


# --- the one number format -----------------------------------------------------------------


def test_format_rules():
    import numpy as np

    assert [clean(v) for v in (np.float64("nan"), float("inf"), None, np.int64(3))] == [
        None,
        None,
        None,
        3,
    ]
    assert clean(1.234567) == 1.2346
    assert number(1234.5678) == "1,234.568" and number(None) == "n/a"
    assert number(-0.5, 1, sign=True, suffix="%") == "-0.5%"
    assert number(2500, scale=1e-3, sign=True) == "+2.500"
    assert number(float("nan"), missing="") == ""


def test_help_states_the_exit_statuses():
    text = " ".join(CliRunner().invoke(main, ["--help"]).stdout.split())
    assert "Exit status: 0 ok; 1 partial" in text and "3 internal error" in text
