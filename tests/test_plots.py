"""The public figure API (tracekit.report.plots): plotly figures of an analysis, the same the
report draws; and the example notebook, executed."""

from __future__ import annotations

import base64
import inspect
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tracekit import summary
from tracekit.analysis import Analysis, analyze, analyze_traces
from tracekit.load import load
from tracekit.report import plots, sections
from tracekit.report.html import embed

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "overlap.ipynb"


def _with_traces(paths) -> Analysis:
    """An analysis that keeps its traces (timelines need them)."""
    loaded = load(paths)
    return analyze_traces(loaded.groups, failures=loaded.failures)


@pytest.fixture(scope="module")
def analysis(run_dir: Path) -> Analysis:
    return _with_traces([run_dir])


def test_step_breakdown_is_the_reports(analysis: Analysis):
    fig = plots.step_breakdown(analysis)
    assert len(fig.data) == 2 * len(summary.BREAKDOWN_PARTS)
    report = sections.build_report(analysis)
    assert report.breakdown is not None
    assert fig.to_json() == report.breakdown.figure.to_json()


def test_phases_is_the_reports(analysis: Analysis):
    fig = plots.phases(analysis)
    report = sections.build_report(analysis)
    assert report.phases is not None
    assert fig.to_json() == report.phases.figure.to_json()
    assert list(fig.data[0].y)[:2] == ["naive · forward", "naive · backward"]


def test_variants_side_by_side(analysis: Analysis):
    fig = plots.variants(analysis)
    ms, overlap = fig.data
    assert list(ms.x) == ["naive", "overlap"]
    assert ms.y == pytest.approx([0.870, 0.680])  # ms per step (tests/test_report.py)
    assert overlap.y[0] == 0 and overlap.y[1] > 50
    assert "speedup vs naive: 1.28×" in ms.customdata[1]
    report = sections.build_report(analysis)
    assert report.variants_chart is not None
    assert fig.to_json() == report.variants_chart.figure.to_json()


def test_rank_timeline_of_one_step(analysis: Analysis):
    fig = plots.rank_timeline(analysis, rank=1, group="overlap", step=2)
    labels = list(fig.layout.yaxis.ticktext)
    assert labels[0] == "rank 1 · step" and "rank 1 · exposed comm" in labels
    assert all(label.startswith("rank 1") for label in labels)
    steps = next(t for t in fig.data if t.meta == "tracekit:step")
    assert len(steps.base) == 1 and steps.base[0] == 0  # the step, from its own start
    assert not fig.layout.updatemenus  # one step: no step buttons


def test_timeline_over_the_headline_window(analysis: Analysis):
    fig = plots.timeline(analysis, "naive")
    steps = next(t for t in fig.data if t.meta == "tracekit:step")
    assert sorted({h.split("</b>")[0] for h in steps.hovertext}) == [
        "<b>ProfilerStep#1",
        "<b>ProfilerStep#2",
        "<b>ProfilerStep#3",
    ]  # every step but the last, on each rank
    buttons = [b.label for b in fig.layout.updatemenus[0].buttons]
    assert buttons == ["all steps", "step 1", "step 2", "step 3"]
    assert embed(sections.FigureSpec("k", fig)).data  # serialisable


def test_timelines_need_the_traces(analysis: Analysis):
    bare = Analysis(
        ranks=analysis.ranks,
        steps=analysis.steps,
        phases=analysis.phases,
        collectives=analysis.collectives,
        matched=analysis.matched,
        stragglers=analysis.stragglers,
    )
    with pytest.raises(ValueError, match="keep_traces=True"):
        plots.rank_timeline(bare)
    with pytest.raises(ValueError, match="no group 'nope'"):
        plots.timeline(analysis, "nope")
    with pytest.raises(ValueError, match="no rank has step 99"):
        plots.timeline(analysis, step=99)


def test_figures_do_not_change_the_analysis(analysis: Analysis):
    before = [f.copy() for f in (analysis.ranks, analysis.steps, analysis.phases)]
    kernels = [t.kernels.copy() for t in analysis.traces["naive"]]
    plots.step_breakdown(analysis)
    plots.variants(analysis)
    plots.rank_timeline(analysis, group="naive", step=2)
    for old, new in zip(before, (analysis.ranks, analysis.steps, analysis.phases), strict=True):
        assert old.equals(new)
    for old, t in zip(kernels, analysis.traces["naive"], strict=True):
        assert old.equals(t.kernels)


# --- the example notebook ------------------------------------------------------------------


def test_notebook_is_checked_in_without_outputs():
    doc = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [c for c in doc["cells"] if c["cell_type"] == "code"]
    assert code and all(not c.get("outputs") for c in code)
    source = "".join("".join(c["source"]) for c in code)
    for name in ("variants", "step_breakdown", "phases", "rank_timeline", "keep_traces=True"):
        assert name in source


def test_notebook_runs_on_a_shared_trace(shared_chrome: Path, tmp_path: Path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    if "keep_traces" not in inspect.signature(analyze).parameters:
        pytest.skip("analyze() has no keep_traces parameter in this checkout")
    copy = tmp_path / "overlap.ipynb"
    shutil.copy(NOTEBOOK, copy)
    monkeypatch.setenv("TRACEKIT_SHARED_TRACES", str(shared_chrome.parent))
    # the kernel imports tracekit from this checkout, whatever is installed
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(NOTEBOOK.parents[1]), *filter(None, [path])])
    )
    nb = nbformat.read(copy, as_version=4)
    nbclient.NotebookClient(
        nb, timeout=300, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    figures = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) == 4  # variants, breakdown, phases, the timeline
    timeline = figures[-1]["data"]["application/vnd.plotly.v1+json"]
    lanes = timeline["layout"]["yaxis"]["ticktext"]
    assert "rank 0 · exposed comm" in lanes and "rank 0 · overlap" in lanes
    compute = [t for t in timeline["data"] if t["meta"] == "tracekit:compute"]
    heights = np.concatenate([_array(t["width"]) for t in compute])
    assert heights.size and (heights > 0).all() and (heights <= 0.8).all()


def _array(value) -> np.ndarray:
    """A plotly JSON array: a list, or a typed array ``{"dtype", "bdata"}`` (base64)."""
    if isinstance(value, dict) and "bdata" in value:
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
    return np.atleast_1d(np.asarray(value, dtype=float))
