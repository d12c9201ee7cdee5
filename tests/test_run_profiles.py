"""run_profiles.sh end to end on CPU: real torchrun, real gloo, real analysis and report.

Nsight Systems cannot run here: one test puts a STAND-IN `nsys` on PATH that records its
arguments, runs the command it was given, and leaves an empty .nsys-rep.
"""

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tracekit import contract
from tracekit.contract import (
    INCOMPLETE,
    MANIFEST,
    REPORT,
    SUMMARY_CSV,
    SUMMARY_JSON,
    TIMING_JSON,
    TRACE_NAME,
    TRAIN_LOG,
    VARIANTS,
)

SCRIPT = ROOT / "run_profiles.sh"
TINY = ["--model-size", "tiny", "--steps", "3", "--nproc", "2"]


def run(*args, env=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def analyze_json(*paths) -> dict:
    proc = subprocess.run(
        [str(ROOT / ".venv/bin/tracekit"), "analyze", *map(str, paths), "--format", "json"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "run"
    proc = run("--out", out, "--variants", "naive,flat,overlap", *TINY)
    return out, proc


@pytest.mark.slow
def test_layout(cpu_run):
    out, proc = cpu_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == f"report: {out / REPORT}"
    assert "skipping Nsight Systems: nsys is not on PATH" in proc.stderr
    for name in (MANIFEST, SUMMARY_JSON, SUMMARY_CSV, REPORT):
        assert (out / name).is_file(), name
    assert not (out / INCOMPLETE).exists()
    for variant in ("naive", "flat", "overlap"):
        files = {p.name for p in (out / variant).iterdir()}
        traces = {TRACE_NAME.format(rank=r) for r in (0, 1)}
        assert {*traces, TIMING_JSON, TRAIN_LOG} <= files


@pytest.mark.slow
def test_manifest_describes_the_run(cpu_run):
    out, _ = cpu_run
    m = json.loads((out / MANIFEST).read_text())
    assert m["status"] == "complete" and m["failed_variants"] == []
    assert m["command"].split()[0].endswith("run_profiles.sh")
    assert m["command"].split()[1:5] == ["--out", str(out), "--variants", "naive,flat,overlap"]
    s = m["settings"]
    assert (s["variants"], s["model_size"], s["steps"], s["nproc_per_node"]) == (
        ["naive", "flat", "overlap"],
        "tiny",
        3,
        2,
    )
    assert m["environment"]["torch"].startswith("2.")
    assert "nsys" in m["environment"]
    listed = {f["path"]: f["bytes"] for f in m["files"]}
    trace = out / "overlap" / "rank-1.trace.json.gz"
    assert listed["overlap/rank-1.trace.json.gz"] == trace.stat().st_size


@pytest.mark.slow
def test_analyze_reads_every_variant(cpu_run):
    out, _ = cpu_run
    doc = analyze_json(out)
    ranks = {(r["group"], r["rank"]): r for r in doc["ranks"]}
    assert set(ranks) == {(v, r) for v in ("naive", "flat", "overlap") for r in (0, 1)}
    assert all(r["comm_us"] > 0 and r["platform"] == "cpu" for r in ranks.values())
    summary = json.loads((out / SUMMARY_JSON).read_text())
    assert [v["group"] for v in summary["variants"]] == ["naive", "flat", "overlap"]


@pytest.mark.slow
def test_existing_out_is_refused_and_kept(cpu_run):
    out, _ = cpu_run
    before = (out / MANIFEST).read_bytes()
    proc = run("--out", out, *TINY)
    assert proc.returncode == 2 and "already exists" in proc.stderr
    assert (out / MANIFEST).read_bytes() == before


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["--bogus"], {}, "unknown argument '--bogus'"),
        (["--variants", "naive,nope"], {}, "unknown variant 'nope'"),
        (["--variants", "naive,flat,naive"], {}, "variant 'naive' is named twice"),
        (["--steps", "0"], {}, "--steps (TRACEKIT_STEPS) must be a whole number >= 1"),
        ([], {"TRACEKIT_WARMUP_STEPS": "abc"}, "TRACEKIT_WARMUP_STEPS must be a whole number"),
        ([], {"TRACEKIT_BATCH_SIZE": "3"}, "TRACEKIT_BATCH_SIZE 3 is not divisible by"),
        (["--model-size", "huge"], {}, "--model-size (TRACEKIT_MODEL_SIZE) must be one of"),
        (["--nproc", "1000"], {}, "1000 is far more than the"),
    ],
)
def test_bad_settings_are_refused_before_anything_starts(tmp_path, args, env, words):
    out = tmp_path / "run"
    proc = run("--out", out, *args, env=env, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [f"run_profiles: error: {words}"] or (
        len(proc.stderr.strip().splitlines()) == 1 and words in proc.stderr
    ), proc.stderr
    assert not out.exists()  # no run directory, no variant started


def test_help():
    proc = run("--help")
    assert proc.returncode == 0 and "TRACEKIT_VARIANTS" in proc.stdout
    # The help's default variant list is the contract's.
    (line,) = [line for line in proc.stdout.splitlines() if "TRACEKIT_VARIANTS" in line]
    assert line.split()[-1] == ",".join(VARIANTS)
    assert f"[--variants {','.join(VARIANTS)}]" in proc.stdout


def script_code() -> str:
    """run_profiles.sh without its comments (the help text is comments)."""
    lines = SCRIPT.read_text().splitlines()
    return "\n".join(re.sub(r"(^|\s)#.*$", "", line) for line in lines)


def test_the_script_takes_its_names_from_the_contract():
    code = script_code()
    # (The nsys output stem, "profile", is also nsys' subcommand: checked by its use below.)
    names = [v for k, v in contract.SHELL.items() if k != "nsys_stem"]
    names += [*VARIANTS, contract.NSYS_REPORT, contract.TIMING_JSON, contract.SUMMARY_CSV]
    for name in names:
        assert not re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", code), name
    assert "tracekit.contract" in code
    assert '--output="$dir/$nsys_stem"' in code
    for key in contract.SHELL:
        assert f"${key}" in code, key


def test_the_contract_evaluates_in_the_shell():
    script = 'eval "$(python3 -m tracekit.contract)"; echo "$train_log|$incomplete|$nsys_stem"'
    proc = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert proc.stdout.strip() == f"{TRAIN_LOG}|{INCOMPLETE}|{contract.NSYS_STEM}"


@pytest.mark.slow
def test_failed_variants_are_named_and_the_others_still_run(tmp_path):
    out = tmp_path / "run"
    # Settings are checked up front, so make training itself fail: its rendezvous port is taken.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        proc = run("--out", out, "--variants", "naive,flat", *TINY, env={"MASTER_PORT": port})
    assert proc.returncode != 0
    for variant in ("naive", "flat"):
        assert f"{variant} FAILED" in proc.stderr
        assert f"log: {out / variant / 'train.log'}" in proc.stderr
    m = json.loads((out / MANIFEST).read_text())
    assert m["status"] == "failed" and m["failed_variants"] == ["naive", "flat"]


@pytest.mark.slow
def test_ctrl_c_leaves_a_run_that_says_it_is_incomplete(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [str(SCRIPT), "--out", str(out), "--variants", "naive,flat", *TINY],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    for line in proc.stdout:
        if line.startswith("run_profiles: naive ..."):
            break
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does to the foreground process group
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert (out / INCOMPLETE).is_file()
    assert "interrupted by SIGINT" in (out / INCOMPLETE).read_text()
    assert json.loads((out / MANIFEST).read_text())["status"] == "interrupted"
    assert processes_mentioning(out) == []


def processes_mentioning(path: Path) -> list[str]:
    """Command lines of live processes that mention ``path`` (training left behind)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(path) in cmdline and state != "Z":
            found.append(cmdline)
    return found


def training(out: Path) -> list[str]:
    """torchrun and its workers for the run in ``out``."""
    return [c for c in processes_mentioning(out) if "workloads.train" in c]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["kill", "timeout"])
def test_sigterm_stops_the_running_variant_at_once(tmp_path, how):
    """SIGTERM to the script alone (not its process group), as `kill` or `timeout` sends it,
    stops training at once: the variant would otherwise train for minutes."""
    out = tmp_path / "run"
    long = ["--model-size", "tiny", "--steps", "100000", "--nproc", "2"]
    cmd = [str(SCRIPT), "--out", str(out), "--variants", "naive,flat", *long]
    if how == "timeout":
        cmd = ["timeout", "--signal=TERM", "1000000", *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("run_profiles: naive ..."):
            break
    # Wait until training is under way (rank 0 is running steps) before signalling.
    log = out / "naive" / TRAIN_LOG
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(training(out)) < 3:
        time.sleep(0.5)
    assert len(training(out)) >= 3, "torchrun and its 2 workers never started"
    time.sleep(2)
    signalled = time.monotonic()
    # With timeout, proc is timeout itself: it passes the SIGTERM on, as it does on expiry.
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    took = time.monotonic() - signalled
    assert proc.returncode == 143, err
    assert took < 30, f"took {took:.0f} s to stop"
    assert "interrupted (SIGTERM)" in err
    assert "interrupted by SIGTERM" in (out / INCOMPLETE).read_text()
    m = json.loads((out / MANIFEST).read_text())
    assert m["status"] == "interrupted"
    assert not (out / "flat").exists()  # the next variant never started
    assert log.is_file()
    assert processes_mentioning(out) == []


STAND_IN_NSYS = """#!/usr/bin/env bash
# STAND-IN for Nsight Systems, which cannot run on this machine: it records its arguments,
# runs the command it profiles, and leaves an empty report where nsys would write one.
echo "$*" >> "$NSYS_ARGS_LOG"
if [[ "$1" == --version ]]; then echo "NVIDIA Nsight Systems version 0.0 (stand-in)"; exit 0; fi
shift
out=""
while [[ "$1" == --* ]]; do [[ "$1" == --output=* ]] && out="${1#--output=}"; shift; done
"$@"
status=$?
: > "$out.nsys-rep"
exit $status
"""


@pytest.mark.slow
def test_nsys_command_line_with_a_stand_in(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nsys = bin_dir / "nsys"
    nsys.write_text(STAND_IN_NSYS)
    nsys.chmod(0o755)
    log = tmp_path / "nsys-args.log"
    out = tmp_path / "run"
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "NSYS_ARGS_LOG": str(log),
        "TRACEKIT_NSYS": "force",  # no GPU here; force the nsys path so its wiring is checked
    }
    proc = run("--out", out, "--variants", "naive", *TINY, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = [line.split() for line in log.read_text().splitlines()]
    profile = [c for c in calls if c[0] == "profile"]
    assert len(profile) == 1
    args = profile[0]
    assert args[1:6] == [
        "--trace=cuda,nvtx,osrt",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        f"--output={out / 'naive' / 'profile'}",
        str(ROOT / ".venv/bin/torchrun"),
    ]
    assert "--cuda-profiler-range" in args and args[args.index("--profile") + 1] == "none"
    assert args[args.index("--variant") + 1] == "naive"
    assert (out / "naive" / "profile.nsys-rep").is_file()
    m = json.loads((out / MANIFEST).read_text())
    assert m["environment"]["nsys"] == "NVIDIA Nsight Systems version 0.0 (stand-in)"


@pytest.mark.slow
def test_default_cpu_settings_separate_the_variants(tmp_path):
    """The README's claim: on CPU defaults, overlap hides >10 pp more comm than naive/flat."""
    out = tmp_path / "run"
    proc = run("--out", out, "--variants", "naive,flat,overlap")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pct = {
        v["group"]: v["overlap_pct"]
        for v in json.loads((out / SUMMARY_JSON).read_text())["variants"]
    }
    assert pct["overlap"] - max(pct["naive"], pct["flat"]) > 10, pct
