"""Nsight Systems SQLite input, checked against plain SQL and a sort-and-sweep written here."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.reference import both, covered, total
from tracekit.analysis import analyze
from tracekit.cli import main
from tracekit.config import AnalysisConfig
from tracekit.errors import TracekitError
from tracekit.load.nsys import load_nsys

FIXTURES = ("h100_2gpu_1s.sqlite", "mfu_2gpu_before.sqlite")
ACTIVITY = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
)


# --- an independent reference (tests/reference.py) ---------------------------------------


def reference(path: Path) -> list[dict]:
    """Per (pid, device) in (pid, device) order: kernel counts, streams, comm/compute/overlap
    and busy time (kernels + copies + fills), straight from SQL."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    pairs = db.execute(
        "SELECT DISTINCT (globalPid >> 24) & 16777215, deviceId, globalPid "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY 1, 2"
    ).fetchall()
    out = []
    for pid, device, gpid in pairs:
        kernels = db.execute(
            "SELECT k.start, k.end, s.value, k.streamId FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName WHERE k.globalPid = ? AND k.deviceId = ?",
            (gpid, device),
        ).fetchall()
        busy = [
            row
            for table in ACTIVITY
            for row in db.execute(
                f"SELECT start, end FROM {table} WHERE globalPid = ? AND deviceId = ?",
                (gpid, device),
            )
        ]
        comm = covered([(s, e) for s, e, name, _ in kernels if name.startswith("nccl")])
        compute = covered([(s, e) for s, e, name, _ in kernels if not name.startswith("nccl")])
        out.append(
            {
                "pid": pid,
                "device": device,
                "kernels": len(kernels),
                "nccl": sum(name.startswith("nccl") for _, _, name, _ in kernels),
                "streams": {stream for *_, stream in kernels},
                "comm": total(comm),
                "compute": total(compute),
                "overlap": both(comm, compute),
                "busy": total(covered(busy)),
            }
        )
    db.close()
    return out


def ns(us: float) -> int:
    return round(us * 1000)


# --- the real exports ----------------------------------------------------------------------


@pytest.mark.parametrize("fixture", FIXTURES)
def test_figures_match_plain_sql(shared_nsys: Path, fixture: str) -> None:
    path = shared_nsys / fixture
    expected = reference(path)
    traces = load_nsys(path, AnalysisConfig())
    result = analyze([path])
    assert [t.rank for t in traces] == list(range(len(expected)))
    for trace, want, (_, row) in zip(traces, expected, result.ranks.iterrows(), strict=True):
        assert (trace.meta["pid"], trace.meta["device"]) == (want["pid"], want["device"])
        k = trace.kernels
        assert set(k["device"]) == {want["device"]}
        assert ((k["kind"] == "comm") | (k["kind"] == "compute")).sum() == want["kernels"]
        assert (k["kind"] == "comm").sum() == want["nccl"]
        assert set(k.loc[k["kind"] != "memory", "stream"]) == want["streams"]
        assert ns(row["comm_us"]) == want["comm"]
        assert ns(row["compute_us"]) == want["compute"]
        assert ns(row["overlap_us"]) == want["overlap"]
        assert ns(row["busy_us"]) == want["busy"]
        assert row["window"] == "all activity"  # no step ranges in these exports


def test_overlap_when_nccl_runs_beside_compute(shared_nsys: Path, tmp_path: Path) -> None:
    """The exports run NCCL on the compute stream (overlap 0); a copy with the NCCL kernels
    moved to their own stream and 0.2 ms earlier gives overlap to check."""
    path = tmp_path / "moved.sqlite"
    shutil.copy(shared_nsys / "mfu_2gpu_before.sqlite", path)
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = 99, start = start - 200000, "
            "end = end - 200000 WHERE demangledName IN "
            "(SELECT id FROM StringIds WHERE value LIKE 'nccl%')"
        )
    want = reference(path)
    assert all(0 < w["overlap"] < w["comm"] for w in want)
    result = analyze([path])
    got = [
        (ns(r["comm_us"]), ns(r["compute_us"]), ns(r["overlap_us"]))
        for _, r in result.ranks.iterrows()
    ]
    assert got == [(w["comm"], w["compute"], w["overlap"]) for w in want]


def test_fixtures_are_what_the_readme_says(shared_nsys: Path) -> None:
    h100 = reference(shared_nsys / "h100_2gpu_1s.sqlite")
    assert [(r["kernels"], r["nccl"], r["streams"]) for r in h100] == [
        (1721, 0, {7}),
        (1721, 0, {15}),
    ]
    mfu = reference(shared_nsys / "mfu_2gpu_before.sqlite")
    assert sum(r["nccl"] for r in mfu) == 66
    assert all(r["comm"] > 0 and r["compute"] > 0 for r in mfu)


def test_launch_is_the_runtime_call_of_the_same_process(shared_nsys: Path) -> None:
    path = shared_nsys / "mfu_2gpu_before.sqlite"
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    # correlation ids repeat across the two processes here, so the process must be matched too
    shared = db.execute(
        "SELECT count(*) FROM (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME "
        "GROUP BY 1 HAVING count(DISTINCT globalTid >> 24) > 1)"
    ).fetchone()[0]
    assert shared > 0
    rows = db.execute(
        "SELECT (k.globalPid >> 24) & 16777215, k.correlationId, k.start, r.start "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
        "ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)"
    ).fetchall()
    db.close()
    expected = {(pid, corr, start): launch for pid, corr, start, launch in rows}
    found = {}
    for trace in load_nsys(path, AnalysisConfig()):
        k = trace.kernels[trace.kernels["kind"] != "memory"]
        for corr, start, launch in zip(
            k["correlation"], k["start_ns"], k["launch_ns"], strict=True
        ):
            found[(trace.meta["pid"], corr, start)] = launch
    assert {key: found[key] for key in expected} == expected
    assert all(found[key] == -1 for key in found.keys() - expected.keys())


def test_aten_ranges_give_no_steps_or_phases_and_the_notes_say_so(shared_nsys: Path) -> None:
    path = shared_nsys / "h100_2gpu_1s.sqlite"
    traces = load_nsys(path, AnalysisConfig())
    assert all(len(t.ranges) == 0 for t in traces)
    assert all(t.meta["nvtx_ranges"] > 0 for t in traces)
    assert "none named step#N or a phase" in traces[0].meta["notes"][0]
    notes = analyze([path]).notes
    assert any("rank 0" in n and "no step ranges" in n for n in notes)
    assert any("rank 1" in n and "no phase ranges" in n for n in notes)
    assert any("no communication" in n for n in notes)


# --- our workloads' NVTX names, added to a copy --------------------------------------------


def _with_steps(shared_nsys: Path, tmp_path: Path) -> tuple[Path, list[tuple[str, int, int]]]:
    """A copy of mfu_2gpu_before with step#1..3 (as StringIds ids) and forward/backward (inline
    text) NVTX ranges on pid 144's main thread, cut at its runtime calls' times."""
    path = tmp_path / "steps.sqlite"
    shutil.copy(shared_nsys / "mfu_2gpu_before.sqlite", path)
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    db = sqlite3.connect(path)
    tid, first, last = db.execute(
        "SELECT globalTid, min(start), max(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME "
        "WHERE (globalTid >> 24) & 16777215 = 144 GROUP BY 1 ORDER BY count(*) DESC LIMIT 1"
    ).fetchone()
    cut = [first + (last + 1 - first) * i // 3 for i in range(4)]
    ranges = []
    for n in range(3):
        lo, hi = cut[n], cut[n + 1]
        mid = (lo + hi) // 2
        ranges += [(f"step#{n + 1}", lo, hi), ("forward", lo, mid), ("backward", mid, hi)]
    next_id = db.execute("SELECT max(id) + 1 FROM StringIds").fetchone()[0]
    for name, lo, hi in ranges:
        if name.startswith("step#"):
            db.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (next_id, name))
            text, text_id, next_id = None, next_id, next_id + 1
        else:
            text, text_id = name, None
        db.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId, globalTid, domainId) "
            "VALUES (?, ?, 59, ?, ?, ?, 0)",
            (lo, hi, text, text_id, tid),
        )
    db.commit()
    db.close()
    return path, ranges


def test_step_and_phase_ranges_from_nvtx(shared_nsys: Path, tmp_path: Path) -> None:
    path, ranges = _with_steps(shared_nsys, tmp_path)
    db = sqlite3.connect(path)
    launched = {
        table: db.execute(
            f"SELECT a.start, a.end, r.start FROM {table} a JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
            "ON r.correlationId = a.correlationId AND (r.globalTid >> 24) = (a.globalPid >> 24) "
            "WHERE (a.globalPid >> 24) & 16777215 = 144"
        ).fetchall()
        for table in ACTIVITY
    }
    db.close()
    rows = [row for table in ACTIVITY for row in launched[table]]
    rank0, rank1 = load_nsys(path, AnalysisConfig())
    steps = rank0.ranges[rank0.ranges["kind"] == "step"]
    assert list(steps["name"]) == ["step#1", "step#2", "step#3"]
    assert list(steps["step"]) == [1, 2, 3]
    for number, (_, lo, hi) in enumerate(r for r in ranges if r[0].startswith("step#")):
        want = sum(lo <= launch < hi for *_, launch in rows)
        assert (rank0.kernels["step"] == number + 1).sum() == want > 0
    gpu = rank0.ranges[(rank0.ranges["kind"] == "phase") & (rank0.ranges["device"] == 0)]
    for name, lo, hi in (r for r in ranges if not r[0].startswith("step#")):
        inside = [(s, e) for s, e, launch in rows if lo <= launch < hi]
        match = gpu[(gpu["name"] == name) & (gpu["start_ns"] == min(s for s, _ in inside))]
        assert list(match["end_ns"]) == [max(e for _, e in inside)]
    assert rank0.meta["phase_source"] == "projected"
    assert len(rank1.ranges) == 0  # the ranges were added to pid 144 only

    result = analyze([path])
    assert list(result.steps[result.steps["rank"] == 0]["step"]) == [1, 2, 3]
    assert set(result.phases[result.phases["rank"] == 0]["phase"]) == {"forward", "backward"}
    assert result.ranks.iloc[0]["window"] == "steps 1-2 (last step excluded)"
    assert not any("rank 0" in n and "no step ranges" in n for n in result.notes)
    assert any("rank 1" in n and "no step ranges" in n for n in result.notes)


def test_missing_nvtx_table_is_analysed_without_steps(shared_nsys: Path, tmp_path: Path) -> None:
    path = tmp_path / "no_nvtx.sqlite"
    shutil.copy(shared_nsys / "mfu_2gpu_before.sqlite", path)
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE NVTX_EVENTS")
    traces = load_nsys(path, AnalysisConfig())
    assert [len(t.ranges) for t in traces] == [0, 0]
    assert traces[0].meta["nvtx_ranges"] is None
    assert "no NVTX_EVENTS table" in traces[0].meta["notes"][0]
    result = analyze([path])
    assert any("no step ranges" in n for n in result.notes)
    assert any("no phase ranges" in n for n in result.notes)
    want = reference(path)
    assert [ns(us) for us in result.ranks["overlap_us"]] == [w["overlap"] for w in want]
    assert [ns(us) for us in result.ranks["comm_us"]] == [w["comm"] for w in want]


def test_schema_variants_inline_names_and_no_runtime_table(tmp_path: Path) -> None:
    """Exports differ between nsys versions: kernel names stored as text, NVTX text without
    textId or eventType, no runtime table, globalTid on NVTX rows only."""
    path = tmp_path / "variant.sqlite"
    pid = 4321
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId, "
            "streamId, correlationId, globalPid, shortName TEXT)"
        )
        db.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, ?, ?, ?, ?)",
            [
                (0, 100, 7, 1, pid << 24, "gemm"),
                (50, 150, 9, 2, pid << 24, "ncclDevKernel_AllReduce_Sum_f32"),
            ],
        )
        db.execute("CREATE TABLE NVTX_EVENTS (start, end, text, globalTid)")
        db.execute("INSERT INTO NVTX_EVENTS VALUES (0, 300, 'step#4', ?)", ((pid << 24) + 9,))
    (trace,) = load_nsys(path, AnalysisConfig())
    k = trace.kernels
    assert list(k["name"]) == ["gemm", "ncclDevKernel_AllReduce_Sum_f32"]
    assert list(k["kind"]) == ["compute", "comm"] and list(k["collective"]) == ["", "allreduce"]
    # no launch known: placed in the step by their start time (and the notes say so)
    assert list(k["launch_ns"]) == [-1, -1] and list(k["step"]) == [4, 4]
    assert list(trace.ranges["name"]) == ["step#4"] and trace.meta["pid"] == pid
    assert "no CUPTI_ACTIVITY_KIND_RUNTIME rows" in trace.meta["notes"][-1]
    (row,) = analyze([path]).ranks.itertuples()
    assert (ns(row.comm_us), ns(row.compute_us), ns(row.overlap_us)) == (100, 100, 50)


# --- bad input -----------------------------------------------------------------------------


def _bad_files(shared_nsys: Path, tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, a phrase its error must contain)."""
    text = tmp_path / "text.sqlite"
    text.write_text('{"traceEvents": []}')
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    whole = (shared_nsys / "mfu_2gpu_before.sqlite").read_bytes()
    half = tmp_path / "half.sqlite"
    half.write_bytes(whole[: len(whole) // 2])
    header = tmp_path / "header.sqlite"
    header.write_bytes(whole[:50])
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(whole[:100] + b"\xff" * 4000 + whole[4100:])
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    old = tmp_path / "old_schema.sqlite"
    with sqlite3.connect(old) as db:
        db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId)")
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1, 2, 0)")
    return {
        "text": (text, "not an SQLite database"),
        "empty": (empty, "empty file"),
        "truncated": (half, "truncated SQLite file"),
        "header only": (header, "truncated SQLite file"),
        "corrupt": (corrupt, "unreadable SQLite database (database disk image is malformed)"),
        "no kernel table": (other, "no CUPTI_ACTIVITY_KIND_KERNEL table"),
        "unreadable schema": (old, "lacks column(s) streamId, correlationId"),
    }


def test_bad_sqlite_files_give_one_line_errors(shared_nsys: Path, tmp_path: Path) -> None:
    for name, (path, phrase) in _bad_files(shared_nsys, tmp_path).items():
        with pytest.raises(TracekitError) as caught:
            load_nsys(path, AnalysisConfig())
        message = str(caught.value)
        assert phrase in message, name
        assert message.startswith(f"{path}: ") and "\n" not in message, name


def test_cli_bad_sqlite_is_one_line_no_traceback(shared_nsys: Path, tmp_path: Path) -> None:
    files = _bad_files(shared_nsys, tmp_path)
    result = CliRunner().invoke(main, ["analyze", str(files["truncated"][0])])
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0
    assert "truncated SQLite file" in result.stderr and "Traceback" not in result.stderr


# --- the CLI end to end --------------------------------------------------------------------


@pytest.mark.parametrize("fixture", FIXTURES)
def test_cli_json(shared_nsys: Path, fixture: str) -> None:
    path = shared_nsys / fixture
    result = CliRunner().invoke(main, ["analyze", str(path), "--format", "json"])
    doc = json.loads(result.stdout)
    want = reference(path)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    for rank, w in zip(doc["ranks"], want, strict=True):
        assert (ns(rank["comm_us"]), ns(rank["compute_us"]), ns(rank["overlap_us"])) == (
            w["comm"],
            w["compute"],
            w["overlap"],
        )
        assert rank["steps"] == [] and rank["phases"] == []
    has_comm = all(w["comm"] for w in want)
    assert result.exit_code == (0 if has_comm else 1)  # 1: no communication in h100_2gpu_1s
    if has_comm:
        assert {c["collective"] for c in doc["collectives"]} == {"sendrecv"}
        assert sum(c["count"] for c in doc["collectives"]) == 66
    else:
        assert "no communication" in result.stderr


# --- .nsys-rep through a stand-in nsys -----------------------------------------------------

# A STAND-IN for Nsight Systems' `nsys`, which cannot run here: it records its arguments and
# "exports" by copying a real SQLite export to the --output path.
STAND_IN = """#!{python}
import shutil, sys
with open({log!r}, "a") as fh:
    fh.write(" ".join(sys.argv[1:]) + "\\n")
if {fail!r}:
    sys.stderr.write("Error: report is corrupt\\n")
    sys.exit(1)
shutil.copy({fixture!r}, sys.argv[sys.argv.index("--output") + 1])
"""


def _stand_in_nsys(tmp_path: Path, fixture: Path, fail: bool = False) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "nsys-calls.log"
    script = bin_dir / "nsys"
    script.write_text(
        STAND_IN.format(python=sys.executable, log=str(log), fail=fail, fixture=str(fixture))
    )
    script.chmod(0o755)
    return log


def _report(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    report = run / "profile.nsys-rep"
    report.write_bytes(b"stand-in report")
    return report


def test_nsys_rep_is_exported_once_and_cached(
    shared_nsys: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixture = shared_nsys / "mfu_2gpu_before.sqlite"
    log = _stand_in_nsys(tmp_path, fixture)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    report = _report(tmp_path)
    traces = load_nsys(report, AnalysisConfig())
    export = report.with_suffix(".sqlite")
    assert export.read_bytes() == fixture.read_bytes()
    calls = log.read_text().splitlines()
    assert len(calls) == 1
    args = calls[0].split()
    assert args[:3] == ["export", "--type", "sqlite"] and args[-1] == str(report)
    assert Path(args[args.index("--output") + 1]).parent == report.parent
    assert [t.source for t in traces] == [export, export]
    assert {p.name for p in report.parent.iterdir()} == {export.name, report.name}

    load_nsys(report, AnalysisConfig())  # the cached export is newer: nsys is not run again
    assert len(log.read_text().splitlines()) == 1

    result = CliRunner().invoke(main, ["analyze", str(report), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    want = reference(fixture)
    assert [ns(r["comm_us"]) for r in json.loads(result.stdout)["ranks"]] == [
        w["comm"] for w in want
    ]


def test_nsys_rep_never_overwrites_an_older_export(
    shared_nsys: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _stand_in_nsys(tmp_path, shared_nsys / "mfu_2gpu_before.sqlite")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    report = _report(tmp_path)
    mine = report.with_suffix(".sqlite")
    mine.write_bytes(b"the user's own file")
    past = report.stat().st_mtime - 100
    os.utime(mine, (past, past))
    with pytest.raises(TracekitError, match="older than the report"):
        load_nsys(report, AnalysisConfig())
    assert mine.read_bytes() == b"the user's own file"
    assert not log.exists()


def test_nsys_rep_without_nsys_or_with_failing_nsys(
    shared_nsys: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = _report(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    result = CliRunner().invoke(main, ["analyze", str(report)])
    assert result.exit_code == 2
    assert "nsys is not on PATH" in result.stderr and result.stderr.count("\n") == 1

    _stand_in_nsys(tmp_path, shared_nsys / "mfu_2gpu_before.sqlite", fail=True)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(TracekitError, match="nsys export failed: Error: report is corrupt"):
        load_nsys(report, AnalysisConfig())
    assert sorted(p.name for p in report.parent.iterdir()) == [report.name]
