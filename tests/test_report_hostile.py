"""report, timeline and export-perfetto on hostile input: an empty timeline, any Unicode
(lone surrogates included) in names and paths, and manifests nested far too deep. Each command
writes its file (or says in one line why not) and never shows a traceback."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.runs import COMM_STREAM, MANIFEST, write_run
from tracekit.cli import main

COMMANDS = ("report", "timeline", "export-perfetto")
# Lone surrogates (escaped in the JSON, as a C++ or JS writer may leave them), emoji,
# right-to-left text, a combining mark, a NUL and HTML.
ODD_NAMES = (
    "gemm\\ud800x",
    "\\udfffnccl_tail",
    "attn_🚀_kernel",
    "שלום_kernel",
    "e\u0301lementwise",
    "nul\\u0000kernel",
    "<img src=x onerror=alert(1)>",
)


def _run(command: str, path: Path, out: Path) -> Result:
    suffix = ".json" if command == "export-perfetto" else ".html"
    return CliRunner().invoke(main, [command, str(path), "-o", str(out.with_suffix(suffix)), "-q"])


def _assert_clean(result: Result) -> None:
    """Exit 0 or 1 (partial), no exception, no traceback."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code in (0, 1), result.stderr
    assert "Traceback" not in result.output


def _written(out: Path, command: str) -> str:
    path = out.with_suffix(".json" if command == "export-perfetto" else ".html")
    data = path.read_bytes()
    return data.decode("utf-8")  # valid UTF-8, whatever the names held


# --- an empty timeline ---------------------------------------------------------------------


def _empty_rank(directory: Path) -> Path:
    """A GPU trace with a launch and nothing else: no kernel, no step, no range."""
    directory.mkdir(parents=True)
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1}
    doc = {
        "distributedInfo": {"rank": 0, "world_size": 1},
        "traceEvents": [launch | {"ts": 10.0, "dur": 1.0, "args": {"correlation": 5}}],
    }
    (directory / "rank-0.json").write_text(json.dumps(doc))
    return directory


@pytest.mark.parametrize("command", COMMANDS)
def test_empty_timeline(command: str, tmp_path: Path):
    run = _empty_rank(tmp_path / "empty")
    out = tmp_path / "out"
    result = _run(command, run, out)
    _assert_clean(result)
    text = _written(out, command)
    if command == "export-perfetto":
        assert json.loads(text)["traceEvents"] is not None
    else:
        assert "</html>" in text


def test_empty_timeline_payload_and_view():
    """The level-of-detail payload and the view of a timeline with no interval."""
    import pandas as pd

    from tracekit.report.figures import timeline_figure
    from tracekit.report.lod import payload, unpack
    from tracekit.report.timeline import SEGMENT_COLUMNS, Timeline, view

    empty = pd.DataFrame({c: pd.Series(dtype=t) for c, t in SEGMENT_COLUMNS.items()})
    steps = pd.DataFrame({"step": [], "start_ns": [], "end_ns": []})
    tl = Timeline("t", "gpu", (), empty, (), steps, 0, "")
    p = payload(tl)
    assert p["groups"] == [] and unpack(p) == []
    assert view(tl).empty
    assert len(timeline_figure(tl).data) == 0


# --- any Unicode ---------------------------------------------------------------------------


def _odd_rank(rank: int) -> str:
    """One rank's trace as JSON text, kernels named ODD_NAMES in the headline step."""
    events = []
    corr = 100
    t = 0.0
    for step in (1, 2):
        events.append(_event("user_annotation", f"ProfilerStep#{step}", t, 100.0, 1, 1))
        events.append(_event("user_annotation", "forward\\ud83d", t + 1, 50.0, 1, 1))
        for i, name in enumerate(ODD_NAMES):
            corr += 1
            at = t + 2 + 10 * i
            events.append(_event("cuda_runtime", "cudaLaunchKernel", at, 0.5, 1, 1, corr=corr))
            events.append(_event("kernel", name, at + 1, 5.0, 0, 7, corr=corr, stream=7))
        corr += 1
        events.append(_event("cuda_runtime", "cudaLaunchKernel", t + 3, 0.5, 1, 1, corr=corr))
        events.append(
            _event(
                "kernel",
                "ncclDevKernel_AllReduce\\udc80",
                t + 4,
                40.0,
                0,
                COMM_STREAM,
                corr=corr,
                stream=COMM_STREAM,
            )
        )
        t += 110
    head = f'{{"distributedInfo": {{"rank": {rank}, "world_size": 2, "note": "\\ud800"}}, '
    return head + '"traceEvents": [' + ", ".join(events) + "]}"


def _event(cat, name, ts, dur, pid, tid, *, corr=None, stream=None) -> str:
    """A JSON event written by hand, so that escapes such as \\ud800 stay as they are."""
    args = []
    if corr is not None:
        args.append(f'"correlation": {corr}')
    if stream is not None:
        args.append(f'"stream": {stream}, "device": 0')
    body = (
        f'"ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid}, '
        f'"ts": {ts}, "dur": {dur}'
    )
    return "{" + body + (', "args": {' + ", ".join(args) + "}" if args else "") + "}"


@pytest.fixture(scope="module")
def odd_run(tmp_path_factory) -> Path:
    """Two ranks whose names hold odd Unicode, in a directory whose name is not UTF-8."""
    root = tmp_path_factory.mktemp("odd")
    name = os.fsdecode(b"run-\xff\xfe-\xf0\x9f\x9a\x80")  # invalid UTF-8, then an emoji
    run = root / name
    run.mkdir()
    for r in (0, 1):
        (run / f"rank-{r}.json").write_text(_odd_rank(r), encoding="utf-8")
    return run


@pytest.mark.parametrize("command", COMMANDS)
def test_any_unicode_in_names_and_paths(command: str, odd_run: Path, tmp_path: Path):
    out = tmp_path / "out"
    result = _run(command, odd_run, out)
    _assert_clean(result)
    text = _written(out, command)
    if command == "export-perfetto":
        names = {e.get("name") for e in json.loads(text)["traceEvents"]}
        assert "attn_🚀_kernel" in names and "gemm\ud800x" in names
    else:
        shown = text + "".join(json.dumps(b, ensure_ascii=False) for b in _json_blocks(text))
        assert "attn_🚀_kernel" in shown and "שלום_kernel" in shown
        assert "<img src=x" not in text  # escaped
        assert "\ufffd" in shown  # a lone surrogate is shown as the replacement character


def _json_blocks(html: str) -> list:
    """The page's figure and timeline data (JSON script elements), parsed."""
    import re

    found = re.findall(r'<script type="application/json" id="[^"]+">(.*?)</script>', html, re.S)
    assert found
    return [json.loads(b) for b in found]


def test_report_html_of_lone_surrogates_is_valid_utf8():
    from tracekit.report.style import encodable

    assert encodable("ok 🚀") == "ok 🚀"
    cleaned = encodable("a\ud800b\udfffc")
    assert cleaned.encode("utf-8") and cleaned.startswith("a") and cleaned.endswith("c")
    assert "\ufffd" in cleaned


# --- deep manifests ------------------------------------------------------------------------


def _nested(depth: int) -> str:
    return '{"a": ' * depth + '"bottom"' + "}" * depth


@pytest.mark.parametrize("depth", [300, 5000])
def test_deep_manifest(depth: int, tmp_path: Path):
    run = write_run(tmp_path / "run", variants=("overlap",), steps=2)
    doc = json.dumps(MANIFEST)[:-1] + ', "deep": ' + _nested(depth) + "}"
    (run / "manifest.json").write_text(doc)
    (run / "overlap" / "timing.json").write_text(_nested(depth))
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(run), "-o", str(out), "-q"])
    _assert_clean(result)
    text = out.read_text(encoding="utf-8")
    if depth == 300:  # read, and shown down to MAX_DEPTH levels
        assert "nested deeper than 8 levels" in text
        assert "H100 &lt;80GB&gt;" in text
    else:  # too deep for the JSON reader: a note, the rest of the report as usual
        assert "nested too deeply to read" in text
    assert result.exit_code == 0


def test_shallow_cuts_deep_values_without_recursing_far():
    from tracekit.report.manifest import MAX_DEPTH, shallow

    value: object = "bottom"
    for _ in range(600):
        value = {"a": [value]}
    cut = shallow(value)
    depth = 0
    while isinstance(cut, dict | list):
        cut = cut["a"] if isinstance(cut, dict) else cut[0]
        depth += 1
    assert depth == MAX_DEPTH and "nested deeper" in cut


def test_export_of_odd_names_reads_back(odd_run: Path, tmp_path: Path):
    """The merged file holds the odd names and tracekit reads it back."""
    out = tmp_path / "merged.json.gz"
    result = CliRunner().invoke(main, ["export-perfetto", str(odd_run), "-o", str(out), "-q"])
    _assert_clean(result)
    with gzip.open(out, "rt", encoding="utf-8") as fh:
        assert json.load(fh)["traceEvents"]
    again = CliRunner().invoke(main, ["analyze", str(out), "--format", "json"])
    _assert_clean(again)
