"""Hostile input never crashes and never changes a number silently (tests/hostile.py builds it).

Each Chrome case spoils tests.test_figures.gpu_trace (comm 25 µs, compute 43 µs, overlap 15 µs);
a spoilt value is either refused in one line naming the file, or dropped/ignored with a note
while the figures stay the ones worked out by hand.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import hostile
from tests.chrome_trace import ALLREDUCE_NEW, TraceBuilder, gpu_trace
from tracekit.analysis import analyze
from tracekit.config import AnalysisConfig
from tracekit.errors import InternalError, TracekitError
from tracekit.load import load, load_file, load_file_safe
from tracekit.load.discover import discover
from tracekit.load.nsys import load_nsys

PARSERS = ("fast", "hta")


def figures(path: Path, parser: str = "fast") -> tuple[float, float, float]:
    r = analyze([path], AnalysisConfig(parser=parser)).ranks.iloc[0]
    return r.comm_us, r.compute_us, r.overlap_us


@pytest.mark.parametrize("case", sorted(hostile.CHROME))
def test_chrome_case(tmp_path: Path, case: str) -> None:
    build, (outcome, words) = hostile.CHROME[case]
    path = hostile.write_chrome(build(), tmp_path / "rank-0.json")
    result = load_file_safe(path, AnalysisConfig())
    if outcome == "error":
        assert isinstance(result, TracekitError) and not isinstance(result, InternalError)
        assert str(path) in str(result) and words in str(result)
        assert "\n" not in str(result)
        return
    assert isinstance(result, list), result
    (trace,) = result
    notes = " | ".join(trace.meta["notes"])
    assert words in notes, notes
    if case == "nccl_unlaunched":
        comm = trace.kernels[trace.kernels["kind"] == "comm"]
        assert len(comm) == 3 and (comm["launch_ns"] == -1).all()
        assert list(comm["step"]) == [1, 1, 2]  # by their start time
        assert set(comm["collective"]) == {"allreduce"}  # by name
        return
    if case == "correlation_string":
        return  # gemm_A lost its launch: it leaves the headline window (checked by the note)
    # everything else: the spoilt value is gone and the figures are the hand-worked ones
    assert figures(path) == (25, 43, 15)


def test_duplicated_events_are_counted_once(tmp_path: Path) -> None:
    build, _ = hostile.CHROME["duplicate_correlation"]
    path = hostile.write_chrome(build(), tmp_path / "rank-0.json")
    (tmp_path / "clean").mkdir()
    clean = gpu_trace().write(tmp_path / "clean" / "rank-0.json")
    assert analyze([path]).collectives["count"].sum() == 2  # as many as without the copy
    assert analyze([clean]).collectives["count"].sum() == 2


@pytest.mark.parametrize("parser", PARSERS)
def test_dropped_events_are_said_by_both_parsers(tmp_path: Path, parser: str) -> None:
    doc = hostile.base()
    hostile._extra_kernel(doc, dur=[1, 2])
    hostile._extra_kernel(doc, ts=1e18)
    path = hostile.write_chrome(doc, tmp_path / "rank-0.json")
    (trace,) = load_file(path, AnalysisConfig(parser=parser))
    assert "1 events dropped: invalid dur" in trace.meta["notes"]
    assert "1 events dropped: timestamp beyond int64 ns" in trace.meta["notes"]
    assert figures(path, parser) == (25, 43, 15)


def test_good_ranks_still_load_beside_a_hostile_one(tmp_path: Path) -> None:
    for rank in (0, 1):
        t = gpu_trace()
        t.rank = rank
        t.write(tmp_path / f"rank-{rank}.json")
    bad = hostile.base()
    bad["distributedInfo"]["rank"] = 10**30
    hostile.write_chrome(bad, tmp_path / "rank-2.json")
    deep = hostile.base()
    deep["traceEvents"][3]["args"] = {"x": hostile._nest(2000)}
    hostile.write_chrome(deep, tmp_path / "rank-3.json")
    loaded = load([tmp_path])
    assert [t.rank for t in loaded.groups[tmp_path.name]] == [0, 1]
    assert sorted(e.path.name for e in loaded.failures) == ["rank-2.json", "rank-3.json"]
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit", "analyze", str(tmp_path), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert [r["rank"] for r in json.loads(proc.stdout)["ranks"]] == [0, 1]
    lines = proc.stderr.strip().splitlines()
    assert any("rank-2.json" in line and "not a usable rank" in line for line in lines)
    assert any("rank-3.json" in line and "nested too deeply" in line for line in lines)


def _without_root_powers() -> list[str]:
    """A command prefix under which file permissions apply (root ignores them otherwise)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: permissions cannot make a file unreadable")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, "--bounding-set", caps, "--inh-caps", caps]


def test_unreadable_file_and_sub_directory_are_one_line_each(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for variant in ("good", "locked"):
        (run / variant).mkdir(parents=True)
        for rank in (0, 1):
            t = gpu_trace()
            t.rank = rank
            t.write(run / variant / f"rank-{rank}.json")
    (run / "good" / "rank-1.json").chmod(0)
    (run / "locked").chmod(0)
    try:
        proc = subprocess.run(
            [*_without_root_powers(), sys.executable, "-m", "tracekit", "analyze", str(run),
             "--format", "json"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        (run / "locked").chmod(0o755)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)
    assert [(r["group"], r["rank"]) for r in doc["ranks"]] == [("good", 0)]
    lines = proc.stderr.strip().splitlines()
    assert any("rank-1.json" in line and "unreadable" in line for line in lines), lines
    assert any("locked" in line and "unreadable directory" in line for line in lines), lines


def test_a_directory_in_place_of_a_file_is_an_error(tmp_path: Path) -> None:
    folder = tmp_path / "rank-5.json"
    folder.mkdir()
    result = load_file_safe(folder, AnalysisConfig())
    assert isinstance(result, TracekitError) and str(folder) in str(result)


# --- ranks ---------------------------------------------------------------------------------


def rankless(t: TraceBuilder) -> dict:
    doc = t.to_dict()
    del doc["distributedInfo"]
    return doc


def test_a_rankless_single_file_is_rank_0_with_a_note(tmp_path: Path) -> None:
    path = hostile.write_chrome(rankless(gpu_trace()), tmp_path / "trace.json")
    a = analyze([path])
    assert list(a.ranks["rank"]) == [0]
    assert any("numbered 0" in n and "natural name order" in n for n in a.notes)
    assert figures(path) == (25, 43, 15)


def test_files_are_in_natural_name_order(tmp_path: Path) -> None:
    for name in ("worker10.json", "worker2.json", "worker1.json", "Worker3.json"):
        (tmp_path / name).write_text("{}")
    (group,) = discover([tmp_path])
    assert [f.name for f in group.files] == [
        "Worker3.json",
        "worker1.json",
        "worker2.json",
        "worker10.json",
    ]


def test_a_directory_of_rankless_files_is_numbered_in_sorted_order(tmp_path: Path) -> None:
    hostile.write_chrome(rankless(gpu_trace()), tmp_path / "b.json")
    late = gpu_trace()
    late.kernel(ALLREDUCE_NEW, 60, 70, stream=22)  # only in a.json: +10 µs of comm
    hostile.write_chrome(rankless(late), tmp_path / "a.json")
    ranks = analyze([tmp_path]).ranks.set_index("rank")
    assert list(ranks.index) == [0, 1]
    assert ranks.loc[0, "comm_us"] == 35 and ranks.loc[1, "comm_us"] == 25  # a.json is rank 0
    (b,) = load_file(tmp_path / "b.json", AnalysisConfig(), default_rank=1)
    assert b.rank == 1 and "numbered 1" in b.meta["notes"][0]


def test_an_internal_bug_is_an_internal_error_with_its_traceback(tmp_path: Path) -> None:
    path = gpu_trace().write(tmp_path / "rank-0.json")
    result = load_file_safe(path, AnalysisConfig(step_patterns=("(",)))  # a broken regex
    assert isinstance(result, InternalError) and "Traceback" in result.traceback
    assert str(path) in str(result)


# --- communication kernels and process groups ---------------------------------------------

SYMM = {
    "multimem": "void (anonymous namespace)::multimem_all_reduce_kernel<float, 16>(float*, "
    "unsigned long, unsigned int**, unsigned long, unsigned long)",
    "one_shot": "void (anonymous namespace)::one_shot_all_reduce_kernel<c10::BFloat16, 16, 8>"
    "(c10::BFloat16**, c10::BFloat16*, c10::BFloat16*, unsigned long, unsigned long, "
    "unsigned int**, unsigned long, unsigned long)",
    "vllm": "void vllm::cross_device_reduce_2stage<__nv_bfloat16, 8>(vllm::RankData*, "
    "vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)",
    "nvshmem": "void c10d::nvshmem_extension::allToAllV(void*, long*, void*, long*, long, "
    "nvshmem_team_t)",
    "p2p": "Memcpy PtoP (Device -> Device)",
}


def test_symmetric_memory_and_other_comm_kernels_count_as_communication(tmp_path: Path) -> None:
    """gemm [10,50) s7; comm kernels of five libraries, each 10 µs, from 40 to 90: overlap
    [40,50) = 10 µs of 50 µs of communication."""
    t = TraceBuilder()
    t.step(1, 0, 100).step(2, 100, 200)
    t.kernel("gemm", 10, 50, stream=7)
    for i, name in enumerate(SYMM.values()):
        t.kernel(name, 40 + 10 * i, 50 + 10 * i, stream=20)
    path = t.write(tmp_path / "rank-0.json")
    (trace,) = load_file(path, AnalysisConfig())
    comm = trace.kernels[trace.kernels["kind"] == "comm"]
    assert len(comm) == 5
    assert list(comm["collective"]) == ["allreduce", "allreduce", "allreduce", "alltoall",
                                        "sendrecv"]  # fmt: skip
    assert figures(path) == (50, 40, 10)


def test_process_group_and_dtype_from_kernel_and_record_args(tmp_path: Path) -> None:
    t = TraceBuilder()
    t.step(1, 0, 100).step(2, 100, 200)
    pg = {"Process Group Name": "3", "Process Group Description": "tp_group",
          "Process Group Ranks": "[0, 2]", "dtype": "BFloat16", "In msg nelems": 8,
          "Out msg nelems": 8, "Collective name": "allreduce"}  # fmt: skip
    t.kernel(ALLREDUCE_NEW, 10, 20, stream=20, **pg)  # args on the kernel (recent PyTorch)
    # args on the record_param_comms op around the launch (older PyTorch)
    t.cpu_op("record_param_comms", 29, 31, **{"Process Group Name": "5", "Group size": 4,
             "dtype": "Float", "Collective name": "all_gather"})  # fmt: skip
    t.kernel("ncclDevKernel_AllGather_RING_LL(x)", 35, 45, stream=20, launch=30)
    t.kernel("ncclDevKernel_AllGather_RING_LL(x)", 55, 65, stream=20, launch=50)  # no args
    (trace,) = load_file(t.write(tmp_path / "rank-0.json"), AnalysisConfig())
    k = trace.kernels[trace.kernels["kind"] == "comm"]
    assert list(k["pg"]) == ["3 (tp_group)", "5", ""]
    assert list(k["pg_size"]) == [2, 4, -1]
    assert list(k["dtype"]) == ["bfloat16", "float", ""]
    assert list(k["bytes"]) == [16, -1, -1]
    assert list(k["collective"]) == ["allreduce", "allgather", "allgather"]


# --- nsys ----------------------------------------------------------------------------------


def test_nsys_text_in_integer_columns_is_left_out_with_a_note(tmp_path: Path) -> None:
    rows = hostile.nsys_two_ranks()
    rows.append(("soon", 5000, 0, 7, 3, hostile.PID_A << 24, "gemm"))  # text start
    rows.append((900, "x", 0, 7, 4, hostile.PID_A << 24, "gemm"))  # text end
    path = hostile.write_nsys(tmp_path / "p.sqlite", rows)
    traces = load_nsys(path, AnalysisConfig())
    assert [t.rank for t in traces] == [0, 1]
    assert "2 CUPTI_ACTIVITY_KIND_KERNEL rows left out" in traces[0].meta["notes"][0]
    r = analyze([path]).ranks.set_index("rank")
    assert list(r["compute_us"]) == [0.1, 0.1] and list(r["comm_us"]) == [0.1, 0.1]


def test_nsys_null_device_makes_no_phantom_rank(tmp_path: Path) -> None:
    rows = hostile.nsys_two_ranks()
    rows.append((1200, 1300, None, 7, 5, hostile.PID_A << 24, "gemm"))
    traces = load_nsys(hostile.write_nsys(tmp_path / "p.sqlite", rows), AnalysisConfig())
    assert [(t.rank, t.meta["pid"], t.meta["device"]) for t in traces] == [
        (0, hostile.PID_A, 0),
        (1, hostile.PID_B, 1),
    ]
    assert "1 CUPTI_ACTIVITY_KIND_KERNEL rows left out" in traces[0].meta["notes"][0]


def test_nsys_nulls_in_processes_and_gpu_ids(tmp_path: Path) -> None:
    path = hostile.write_nsys(
        tmp_path / "p.sqlite",
        hostile.nsys_two_ranks(),
        extra_sql=(
            "CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT)",
            f"INSERT INTO PROCESSES VALUES (NULL, 1, 'ghost'), ({hostile.PID_A << 24}, 1, 'py')",
            "CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT)",
            "INSERT INTO TARGET_INFO_GPU VALUES (NULL, 'ghost'), (0, 'H100')",
        ),
    )
    traces = load_nsys(path, AnalysisConfig())
    assert [(t.meta["process"], t.meta["device_name"]) for t in traces] == [("py", "H100"),
                                                                            ("", "")]  # fmt: skip


STAND_IN = """#!{python}
import sys, time
out = sys.argv[sys.argv.index("--output") + 1]
if {sleep}:
    time.sleep({sleep})
open(out, "wb").write(b"garbage, not SQLite")
"""


@pytest.mark.parametrize("sleep", [0, 5])
def test_nsys_export_is_validated_and_bounded_in_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleep: int
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nsys = bin_dir / "nsys"
    nsys.write_text(STAND_IN.format(python=sys.executable, sleep=sleep))
    nsys.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TRACEKIT_NSYS_EXPORT_TIMEOUT", "1")
    report = tmp_path / "run" / "profile.nsys-rep"
    report.parent.mkdir()
    report.write_bytes(b"report")
    words = "did not finish within 1 s" if sleep else "unusable file (not an SQLite database"
    with pytest.raises(TracekitError, match=words.replace("(", r"\(")):
        load_nsys(report, AnalysisConfig())
    assert [p.name for p in report.parent.iterdir()] == [report.name]  # nothing cached


def test_nsys_copy_between_two_gpus_is_communication(tmp_path: Path) -> None:
    """A MEMCPY row from GPU 0 to GPU 1 is a peer copy (comm); one within GPU 0 is memory."""
    pid = hostile.PID_A << 24
    path = hostile.write_nsys(
        tmp_path / "p.sqlite",
        [(1000, 1100, 0, 7, 1, pid, "gemm")],
        extra_sql=(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, streamId, "
            "correlationId, globalPid, bytes, copyKind, srcDeviceId, dstDeviceId)",
            f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (1050, 1250, 0, 9, 7, {pid}, 64, 8, "
            f"0, 1), (1300, 1400, 0, 9, 8, {pid}, 64, 8, 0, 0)",
        ),
    )
    (trace,) = load_nsys(path, AnalysisConfig())
    k = trace.kernels.set_index("start_ns")
    assert k.loc[1050, "kind"] == "comm" and k.loc[1050, "name"].startswith("Memcpy PtoP")
    assert k.loc[1300, "kind"] == "memory" and k.loc[1300, "name"].startswith("Memcpy DtoD")
    r = analyze([path]).ranks.iloc[0]
    assert (r.comm_us, r.overlap_us) == (0.2, 0.05)


def test_unlaunched_comm_is_said_not_called_missing(tmp_path: Path) -> None:
    """NCCL kernels that lost their launch correlation: the headline (HTA's window) leaves them
    out, but the notes say they exist, and the per-step figures count them by start time."""
    build, _ = hostile.CHROME["nccl_unlaunched"]
    path = hostile.write_chrome(build(), tmp_path / "rank-0.json")
    result = analyze([path])
    notes = " | ".join(result.notes)
    assert "no communication in the headline window" in notes
    assert "3 communication kernels (3 without a launch correlation" in notes
    assert "no communication (communication kernels)" not in notes
    assert result.steps["comm_us"].sum() > 0  # placed in steps by time, so counted there
