"""The merged Perfetto trace: valid Chrome JSON, and tracekit reads the same figures back."""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from tests.chrome_trace import TraceBuilder
from tests.reference import both, covered, total
from tracekit.analysis import Analysis, analyze
from tracekit.cli import main
from tracekit.errors import TracekitError
from tracekit.export.perfetto import (
    FLOW_CAT,
    align_clocks,
    merged_trace,
    single_run,
    write_trace,
)
from tracekit.load import load
from tracekit.load.chrome import MERGED_KEY, read_events

METADATA = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}


# --- a small Chrome JSON validator ---------------------------------------------------------


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def chrome_problems(doc: Any) -> list[str]:
    """What keeps ``doc`` from being a well-formed Chrome trace (empty when none)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["no traceEvents list"]
    problems: list[str] = []
    slices: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    flows: dict[Any, dict[str, dict]] = defaultdict(dict)
    named: set[int] = set()
    for i, e in enumerate(doc["traceEvents"]):
        missing = [k for k in ("ph", "pid", "tid", "name") if k not in e]
        if missing:
            problems.append(f"event {i} lacks {missing}")
            continue
        if not (isinstance(e["pid"], int) and isinstance(e["tid"], int)):
            problems.append(f"event {i}: pid/tid not integers")
        ph = e["ph"]
        if ph == "X":
            if not (_number(e.get("ts")) and _number(e.get("dur")) and e["dur"] >= 0):
                problems.append(f"event {i}: X needs numeric ts and dur >= 0: {e}")
            else:
                slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
            if not isinstance(e.get("args", {}), dict):
                problems.append(f"event {i}: args is not an object")
        elif ph == "M":
            args = e.get("args")
            if e["name"] not in METADATA or not isinstance(args, dict):
                problems.append(f"event {i}: malformed metadata {e}")
            elif e["name"].endswith("_name") and not isinstance(args.get("name"), str):
                problems.append(f"event {i}: {e['name']} without a name")
            elif e["name"].endswith("sort_index") and not isinstance(args.get("sort_index"), int):
                problems.append(f"event {i}: {e['name']} without an integer sort_index")
            if e["name"] == "process_name":
                named.add(e["pid"])
        elif ph in ("s", "f"):
            if "id" not in e or not _number(e.get("ts")):
                problems.append(f"event {i}: flow needs an id and a ts")
            elif ph in flows[e["id"]]:
                problems.append(f"event {i}: second '{ph}' for flow id {e['id']}")
            else:
                flows[e["id"]][ph] = e
            if ph == "f" and e.get("bp") != "e":
                problems.append(f"event {i}: flow end without bp 'e'")
        else:
            problems.append(f"event {i}: unexpected ph {ph!r}")
    for thread, spans in slices.items():
        if thread[0] not in named:
            problems.append(f"pid {thread[0]} has no process_name")
        stack: list[float] = []  # ends of the open slices; slices on a thread must nest
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            if stack and end > stack[-1]:
                problems.append(f"thread {thread}: slice [{start}, {end}) crosses its parent")
                break
            stack.append(end)
    for flow_id, pair in flows.items():
        if set(pair) != {"s", "f"}:
            problems.append(f"flow {flow_id} has only {sorted(pair)}")
            continue
        if (pair["s"].get("cat"), pair["s"]["name"]) != (pair["f"].get("cat"), pair["f"]["name"]):
            problems.append(f"flow {flow_id}: its ends differ in cat or name")
        for end in pair.values():
            spans = slices.get((end["pid"], end["tid"]), [])
            if not any(s <= end["ts"] <= e for s, e in spans):
                problems.append(f"flow {flow_id}: '{end['ph']}' is in no slice of its thread")
    return problems


def test_the_validator_catches_problems() -> None:
    good = {
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "p"}},
            {"ph": "X", "name": "a", "pid": 1, "tid": 2, "ts": 0.0, "dur": 5.0},
            {"ph": "X", "name": "b", "pid": 1, "tid": 3, "ts": 1.0, "dur": 5.0},
            {"ph": "s", "name": "c", "cat": "k", "id": 1, "pid": 1, "tid": 2, "ts": 1.0},
            {"ph": "f", "name": "c", "cat": "k", "id": 1, "pid": 1, "tid": 3, "ts": 2, "bp": "e"},
        ]
    }
    assert chrome_problems(good) == []
    bad = json.loads(json.dumps(good))
    bad["traceEvents"][1]["dur"] = -1
    bad["traceEvents"][2]["tid"] = 2  # now crosses nothing but leaves the 'f' without a slice
    bad["traceEvents"][4].pop("bp")
    bad["traceEvents"].append({"ph": "X", "name": "x", "pid": 9, "tid": 1, "ts": 0, "dur": 1})
    found = "\n".join(chrome_problems(bad))
    for phrase in ("dur >= 0", "without bp", "in no slice", "pid 9 has no process_name"):
        assert phrase in found


# --- helpers -------------------------------------------------------------------------------


def _figures(a: Analysis) -> dict[str, pd.DataFrame]:
    """Every table of an analysis, without the columns that name the input."""
    tables = {
        "ranks": a.ranks,
        "steps": a.steps,
        "phases": a.phases,
        "collectives": a.collectives,
        # skews compare clocks, which --align moves on purpose
        "matched": a.matched.drop(columns=["start_skew_us", "end_skew_us"]),
        "stragglers": a.stragglers,
    }
    return {
        k: t.drop(columns=[c for c in ("group", "source") if c in t]).reset_index(drop=True)
        for k, t in tables.items()
    }


def assert_same_figures(before: Analysis, after: Analysis) -> None:
    old, new = _figures(before), _figures(after)
    for name in old:
        pd.testing.assert_frame_equal(new[name], old[name], check_dtype=False, obj=name)


def _export(inputs: list[Path], out: Path, *args: str) -> tuple[dict, Any]:
    result = CliRunner().invoke(main, ["export-perfetto", *map(str, inputs), "-o", str(out), *args])
    assert result.exit_code == 0, result.stderr
    opener = gzip.open if out.name.endswith(".gz") else open
    with opener(out, "rt") as fh:
        return json.load(fh), result


def _processes(doc: dict) -> dict[int, str]:
    return {
        e["pid"]: e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }


def _slices(doc: dict, name: str) -> dict[int, list[tuple[int, int]]]:
    """The X events called ``name`` by pid, as ns intervals after the file's time base."""
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["name"] == name:
            start = round(e["ts"] * 1000)
            out[e["pid"]].append((start, start + round(e["dur"] * 1000)))
    return out


def _spans(k: pd.DataFrame, mask: pd.Series) -> list[tuple[int, int]]:
    """Merged [start, end) of the masked kernel rows (reference sweep)."""
    return covered(list(zip(k["start_ns"][mask], k["end_ns"][mask], strict=True)))


# --- a real two-rank NCCL run --------------------------------------------------------------


def test_two_rank_training_round_trip(shared_chrome: Path, tmp_path: Path) -> None:
    run = shared_chrome / "two_rank_training"
    out = tmp_path / "merged.json"
    doc, _ = _export([run], out)
    assert chrome_problems(doc) == []
    assert next(iter(doc)) == MERGED_KEY  # HTA reads top-level keys only up to traceEvents

    header = doc[MERGED_KEY]["ranks"]
    assert [h["rank"] for h in header] == [0, 1]
    pids = [set(h["pids"]) for h in header]
    assert not pids[0] & pids[1]
    names = _processes(doc)
    assert {names[int(p)] for p in pids[0]} == {"rank 0", "rank 0 GPU 0"}
    assert {names[int(p)] for p in pids[1]} == {"rank 1", "rank 1 GPU 1"}
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert {"stream 7", "stream 84 (comm)", "steps", "phase: forward", "comm ∥ compute"} <= threads

    before, after = analyze([run]), analyze([out])
    assert_same_figures(before, after)

    # The overlap track is where NCCL kernels overlap compute kernels (reference sweep here).
    raw = {t.rank: t for t in load([run]).groups["two_rank_training"]}
    overlap = _slices(doc, "comm ∥ compute")
    exposed = _slices(doc, "exposed comm")
    for h in header:
        k = raw[h["rank"]].kernels
        comm = _spans(k, k["name"].astype(str).str.startswith("nccl"))
        compute = _spans(k, k["kind"] == "compute")
        gpu_pid = next(int(p) for p, d in h["pids"].items() if d >= 0)
        assert total(overlap[gpu_pid]) == both(comm, compute) > 0
        assert total(exposed[gpu_pid]) == total(comm) - both(comm, compute)

    # One flow per collective matched on both ranks, from rank 0's kernel to rank 1's.
    starts = [e for e in doc["traceEvents"] if e["ph"] == "s" and e["cat"] == FLOW_CAT]
    per_rank = [(t.kernels["kind"] == "comm").sum() for t in raw.values()]
    assert len(starts) == min(per_rank) == 10
    gpu0 = next(int(p) for p, d in header[0]["pids"].items() if d >= 0)
    assert {e["pid"] for e in starts} == {gpu0}


def test_host_ops_and_launch_flows_are_kept(shared_chrome: Path, tmp_path: Path) -> None:
    """Every host cpu_op and runtime call of the source is kept on its thread, and each kernel
    has an "ac2g" arrow from the runtime call that launched it, as Kineto writes them."""
    run = shared_chrome / "two_rank_training"
    doc, _ = _export([run], tmp_path / "merged.json")
    assert chrome_problems(doc) == []
    events = doc["traceEvents"]
    header = doc[MERGED_KEY]["ranks"]
    raw = {t.rank: t for t in load([run]).groups["two_rank_training"]}
    for h in header:
        host_pid = next(int(p) for p, d in h["pids"].items() if d < 0)
        _, source = read_events(Path(h["source"]))
        on_host = [e for e in events if e["ph"] == "X" and e["pid"] == host_pid]
        r = raw[h["rank"]].ranges
        ranges = set(r.loc[r["device"] < 0, ["name", "start_ns", "end_ns"]].itertuples(False))
        for cat in ("cpu_op", "cuda_runtime"):
            want = source[source["cat"] == cat]
            # phases recorded as cpu_ops are written once, as phase slices
            want = want[
                [x not in ranges for x in want[["name", "start_ns", "end_ns"]].itertuples(False)]
            ]
            got = [e for e in on_host if e["cat"] == cat]
            assert len(got) == len(want) > 1000
            assert {e["tid"] for e in got} == set(want["tid"])
        k = raw[h["rank"]].kernels
        launched = k[(k["device"] >= 0) & (k["correlation"] >= 0)]["correlation"].nunique()
        mine = [e for e in events if e.get("cat") == "ac2g" and e["pid"] in map(int, h["pids"])]
        starts = [e for e in mine if e["ph"] == "s"]
        ends = [e for e in mine if e["ph"] == "f"]
        assert len(starts) == len(ends) == launched
        assert {e["pid"] for e in starts} == {host_pid}
        # each arrow starts on the runtime call whose correlation it carries
        calls = {
            (e["tid"], e["ts"]): e["args"].get("correlation")
            for e in on_host
            if e["cat"] == "cuda_runtime"
        }
        ids = {e["id"] for e in starts}
        assert all(calls[(e["tid"], e["ts"])] == e["id"] % (1 << 40) for e in starts)
        assert ids == {e["id"] for e in ends}
    assert_same_figures(analyze([run]), analyze([tmp_path / "merged.json"]))


@pytest.mark.parametrize(
    "name", ["multi_stream_nccl", "nccl_allreduce", "world_size_1_no_nccl", "amd_rocm"]
)
def test_every_shared_trace_exports_valid_with_its_host_ops(
    name: str, shared_chrome: Path, tmp_path: Path
) -> None:
    """Real traces with hashed thread ids (negative, or beyond tracekit's own track ids) and
    host ops that cross their parents (which are cut to nest): valid, and the same figures."""
    run = shared_chrome / name
    out = tmp_path / "merged.json.gz"
    doc, _ = _export([run], out)
    assert chrome_problems(doc) == []
    ops = [e for e in doc["traceEvents"] if e.get("cat") in ("cpu_op", "cuda_runtime")]
    assert ops
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    _, source = read_events(next(run.glob("*.json.gz")))
    for tid in set(source.loc[source["cat"] == "cpu_op", "tid"]):
        assert f"thread {tid}" in threads
    assert_same_figures(analyze([run]), analyze([out]))


def test_align_moves_rank_clocks_and_keeps_figures(shared_chrome: Path, tmp_path: Path) -> None:
    run = shared_chrome / "two_rank_training"
    out = tmp_path / "aligned.json.gz"
    doc, result = _export([run], out, "--align")
    assert chrome_problems(doc) == []
    lines = [line for line in result.stderr.splitlines() if "clock moved by" in line]
    assert [line.split(":")[1].strip() for line in lines] == ["rank 0", "rank 1"]
    alignment = doc[MERGED_KEY]["clock_alignment"]
    offsets = {int(r): o for r, o in alignment["offsets_ns"].items()}
    assert offsets[0] == 0 and alignment["matched_collectives"] == 10
    assert [h["clock_offset_ns"] for h in doc[MERGED_KEY]["ranks"]] == [offsets[0], offsets[1]]
    assert f"{offsets[1] / 1e3:+.3f} µs" in lines[1]
    assert_same_figures(analyze([run]), analyze([out]))


# --- a CPU (gloo) pair built here ----------------------------------------------------------

SKEW_US = 500.0  # rank 1's clock runs this far ahead
WORKER = 77  # gloo's worker thread


def _gloo_rank(rank: int) -> TraceBuilder:
    """Three steps of forward / backward (with an all-reduce call and gloo's worker span) /
    optimizer; the gloo spans end at the same moment on both ranks (before the skew)."""
    b = TraceBuilder(rank=rank, world_size=2, backend="gloo")
    skew = SKEW_US * rank
    for n in range(1, 4):
        s = n * 1000.0 + skew
        b.step(n, s, s + 1000)
        b.host_range("forward", s, s + 300)
        b.cpu_op("aten::mm", s + 10, s + 290 + 5 * rank)
        b.host_range("backward", s + 300, s + 800)
        b.cpu_op("autograd::engine::evaluate_function", s + 310, s + 700 - 20 * rank)
        b.cpu_op("c10d::allreduce_", s + 500, s + 520)
        b.cpu_op("gloo:all_reduce", s + 520 + 20 * rank, s + 750, tid=WORKER,
                 **{"Input Dims": [[256]], "Input type": ["float"]})  # fmt: skip
        b.host_range("optimizer", s + 800, s + 950)
        b.cpu_op("aten::add_", s + 810, s + 900)
    return b


def _gloo_run(tmp_path: Path) -> Path:
    run = tmp_path / "gloo_run"
    run.mkdir()
    for rank in (0, 1):
        _gloo_rank(rank).write(run / f"rank-{rank}.json")
    return run


def test_cpu_gloo_pair_round_trip_and_alignment(tmp_path: Path) -> None:
    run = _gloo_run(tmp_path)
    before = analyze([run])
    assert list(before.ranks["platform"]) == ["cpu", "cpu"]
    assert (before.ranks["overlap_us"] > 0).all()
    assert set(before.collectives["bytes"]) == {2 * 1024}  # 2 steps in the window

    plain, aligned = tmp_path / "plain.json", tmp_path / "aligned.json"
    doc, _ = _export([run], plain)
    assert chrome_problems(doc) == []
    assert_same_figures(before, analyze([plain]))

    doc, result = _export([run], aligned, "--align")
    assert chrome_problems(doc) == []
    offsets = doc[MERGED_KEY]["clock_alignment"]["offsets_ns"]
    assert offsets == {"0": 0, "1": -round(SKEW_US * 1000)}
    assert "rank 1: clock moved by -500.000 µs" in result.stderr
    assert_same_figures(before, analyze([aligned]))
    # after alignment the gloo spans of the two ranks end together
    ends = {
        pid: sorted(e for _, e in spans) for pid, spans in _slices(doc, "gloo:all_reduce").items()
    }
    assert len(ends) == 2 and len(set(map(tuple, ends.values()))) == 1
    names = set(_processes(doc).values())
    assert names == {"rank 0", "rank 1"}
    flows = [e for e in doc["traceEvents"] if e["ph"] in "sf"]
    assert len(flows) == 2 * 3  # three matched all-reduces, one arrow each


# --- nsys input ----------------------------------------------------------------------------


def test_nsys_export_round_trip(shared_nsys: Path, tmp_path: Path) -> None:
    path = shared_nsys / "mfu_2gpu_before.sqlite"
    out = tmp_path / "nsys.json"
    doc, _ = _export([path], out)
    assert chrome_problems(doc) == []
    assert_same_figures(analyze([path]), analyze([out]))
    flows = [e for e in doc["traceEvents"] if e["ph"] == "s"]
    assert len([e for e in flows if e["cat"] == FLOW_CAT]) == 33
    assert len([e for e in flows if e["cat"] == "ac2g"]) > 1000  # from the launch slices
    # one reduce kernel starts before the previous kernel on stream 7 ends: shown on a lane
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert "stream 7 (comm) (lane 2)" in threads


# --- the library and CLI contract ----------------------------------------------------------


def test_refuses_to_replace_without_force_and_writes_atomically(tmp_path: Path) -> None:
    run = _gloo_run(tmp_path)
    out = tmp_path / "merged.json"
    out.write_text("keep me")
    result = CliRunner().invoke(main, ["export-perfetto", str(run), "-o", str(out)])
    assert result.exit_code == 2
    assert "already exists; pass --force" in result.stderr and out.read_text() == "keep me"
    result = CliRunner().invoke(main, ["export-perfetto", str(run), "-o", str(out), "--force"])
    assert result.exit_code == 0 and json.loads(out.read_text())[MERGED_KEY]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gloo_run", "merged.json"]


def test_refuses_several_groups(tmp_path: Path, shared_chrome: Path) -> None:
    run = _gloo_run(tmp_path)
    out = tmp_path / "m.json"
    result = CliRunner().invoke(
        main, ["export-perfetto", str(run), str(shared_chrome / "nccl_allreduce"), "-o", str(out)]
    )
    assert result.exit_code == 2 and "export one run" in result.stderr
    assert result.stderr.count("\n") == 1 and not out.exists()


def test_library_functions_are_pure(tmp_path: Path) -> None:
    traces = single_run(load([_gloo_run(tmp_path)]).groups)
    copies = [t.kernels.copy() for t in traces]
    doc = merged_trace(traces, align_clocks(traces))
    for trace, copy in zip(traces, copies, strict=True):
        pd.testing.assert_frame_equal(trace.kernels, copy)
    with pytest.raises(TracekitError, match="already exists"):
        target = tmp_path / "x.json"
        target.write_text("")
        write_trace(doc, target)
    with pytest.raises(TracekitError, match="2 groups"):
        single_run({"a": traces[:1], "b": traces[1:]})


# --- Perfetto's own trace processor, where it can run --------------------------------------


def _trace_processor() -> str | None:
    """A trace_processor_shell binary: the perfetto package downloads one on first use, which
    needs the network, so the test uses one only when it is already here."""
    found = os.environ.get("TRACE_PROCESSOR_BIN") or shutil.which("trace_processor_shell")
    cached = Path.home() / ".local/share/perfetto/prebuilts"
    if not found and cached.is_dir():
        found = next((str(p) for p in cached.glob("trace_processor_shell*") if p.is_file()), None)
    return found


def test_perfetto_trace_processor_reads_it(shared_chrome: Path, tmp_path: Path) -> None:
    tp_module = pytest.importorskip("perfetto.trace_processor")
    binary = _trace_processor()
    if binary is None:
        pytest.skip("no trace_processor_shell here (the perfetto package would download it)")
    out = tmp_path / "merged.json"
    doc, _ = _export([shared_chrome / "two_rank_training"], out)
    config = tp_module.TraceProcessorConfig(bin_path=binary)
    with tp_module.TraceProcessor(trace=str(out), config=config) as tp:

        def query(sql: str) -> pd.DataFrame:
            return tp.query(sql).as_pandas_dataframe()

        processes = set(query("select name from process where name is not null")["name"])
        assert {"rank 0", "rank 1", "rank 0 GPU 0", "rank 1 GPU 1"} <= processes
        x_events = sum(e["ph"] == "X" for e in doc["traceEvents"])
        assert query("select count(*) as n from slice")["n"][0] == x_events
        flows = sum(e["ph"] == "s" for e in doc["traceEvents"])
        assert query("select count(*) as n from flow")["n"][0] == flows
        errors = query("select name, value from stats where severity = 'error' and value > 0")
        assert errors.empty, errors
