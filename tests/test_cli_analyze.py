"""`tracekit analyze` end to end as a subprocess: formats, filters, and bad input."""

import csv
import gzip
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chrome_trace import TraceBuilder, gpu_trace


def run(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", "analyze", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, path: Path, words: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1, proc.stderr
    assert str(path) in lines[0] and words in lines[0], lines[0]


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("good")
    gpu_trace().write(d / "rank-0.json.gz")
    t = gpu_trace()
    t.rank = 1
    t.write(d / "rank-1.json")
    return d


def test_json_format(good):
    proc = run(good, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    r0 = doc["ranks"][0]
    assert (r0["comm_us"], r0["overlap_us"], r0["overlap_pct"]) == (25.0, 15.0, 60.0)
    assert [s["step"] for s in r0["steps"]] == [1, 2]
    assert {"collectives", "notes", "matched_collectives", "stragglers"} <= set(doc)


def test_csv_and_table_formats(good):
    rows = list(csv.DictReader(io.StringIO(run(good, "--format", "csv").stdout)))
    assert {r["scope"] for r in rows} == {"rank", "step"}
    assert len(rows) == 2 + 4
    table = run(good)
    assert table.returncode == 0
    assert "overlap %" in table.stdout and "60.0" in table.stdout


def test_rank_and_step_filters(good):
    doc = json.loads(run(good, "--format", "json", "--ranks", "1", "--steps", "2").stdout)
    assert [r["rank"] for r in doc["ranks"]] == [1]
    assert doc["ranks"][0]["comm_us"] == 15.0
    proc = run(good, "--steps", "x-y")
    assert proc.returncode == 2 and "--steps" in proc.stderr


def write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def gz(data: bytes) -> bytes:
    return gzip.compress(data)


VALID = json.dumps(gpu_trace().to_dict()).encode()
BAD_INPUTS = {
    "empty.json": (b"", "empty file"),
    "blank.json": (b"   \n", "only whitespace"),
    "notjson.json": (b"hello world", "not JSON"),
    "array.json": (b"[1, 2, 3]", "JSON array"),
    "truncated.json": (VALID[: len(VALID) // 2], "not valid JSON"),
    "truncated.json.gz": (gz(VALID)[:-200], "truncated or corrupt gzip"),
    "corrupt.json.gz": (gz(VALID)[:20] + b"\x00" * 50 + gz(VALID)[70:], "corrupt gzip"),
    "plain.json.gz": (VALID, "not gzip-compressed"),
    "noevents.json": (b'{"schemaVersion": 1}', "no traceEvents"),
    "eventsdict.json": (b'{"traceEvents": {"a": 1}}', "traceEvents is a dict"),
    "emptyevents.json": (b'{"traceEvents": []}', "traceEvents is empty"),
    "metaonly.json": (b'{"traceEvents": [{"ph": "M", "name": "x", "pid": 1}]}', "only metadata"),
    "nodur.json": (
        b'{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "pid": 1, "tid": 1}]}',
        "lack the 'dur' field",
    ),
    "negative.json": (
        b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 5, "dur": -3,'
        b' "pid": 0, "tid": 7, "args": {"stream": 7, "correlation": 1}}]}',
        "negative durations",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_naming_the_file(tmp_path, name):
    data, words = BAD_INPUTS[name]
    path = write_bytes(tmp_path / name, data)
    assert_one_line_error(run(path), path, words)


def test_empty_directory(tmp_path):
    assert_one_line_error(run(tmp_path), tmp_path, "no trace files")


def test_not_a_trace_file(tmp_path):
    path = write_bytes(tmp_path / "notes.txt", b"x")
    assert_one_line_error(run(path), path, "not a trace file")


def test_good_ranks_reported_and_bad_ones_named(tmp_path, good):
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    gpu_trace().write(mixed / "rank-0.json")
    bad = write_bytes(mixed / "rank-1.json", VALID[:100])
    proc = run(mixed, "--format", "json")
    assert proc.returncode == 1
    assert [r["rank"] for r in json.loads(proc.stdout)["ranks"]] == [0]
    assert_one_line_error(proc, bad, "not valid JSON")


def test_no_communication_is_an_error_line_but_figures_still_print(tmp_path):
    path = TraceBuilder().step(1, 0, 50).step(2, 50, 100).kernel("gemm", 10, 20)
    path = path.write(tmp_path / "rank-0.json")
    proc = run(path, "--format", "json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["ranks"][0]["overlap_pct"] is None
    assert_one_line_error(proc, path, "no communication")


def test_duplicate_rank_is_named(tmp_path):
    gpu_trace().write(tmp_path / "a.json")
    gpu_trace().write(tmp_path / "b.json")
    proc = run(tmp_path)
    assert proc.returncode == 1 and "rank 0 is also in" in proc.stderr


def test_shared_real_traces_end_to_end(shared_chrome):
    proc = run(
        shared_chrome / "two_rank_training", shared_chrome / "nccl_allreduce", "--format", "json"
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    pct = {(r["group"], r["rank"]): r["overlap_pct"] for r in doc["ranks"]}
    assert pct[("two_rank_training", 0)] == pytest.approx(11.81, abs=0.01)
    assert pct[("nccl_allreduce", 0)] == pytest.approx(14.76, abs=0.01)
    assert doc["stragglers"] and doc["collectives"]


def test_help():
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit", "analyze", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "--format" in proc.stdout
