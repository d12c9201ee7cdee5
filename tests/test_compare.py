"""compare: pairing, verdicts with a noise threshold, the CI gate, and the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.test_report_runs import (
    EVIL,
    run_dir,  # noqa: F401 - fixture
    write_run,
    write_variant,
)
from tracekit.analysis import analyze
from tracekit.cli import main
from tracekit.compare import (
    FASTER,
    SAME,
    SLOWER,
    combine,
    compare,
    pair_groups,
    relabel,
    to_dict,
    to_text,
    verdict,
)
from tracekit.errors import TracekitError


def _row(step_ms: float, sd: float = float("nan"), steps: int = 3, group: str = "g") -> dict:
    return {"group": group, "step_ms": step_ms, "step_ms_sd": sd, "steps": steps}


def test_verdict_uses_the_noise_floor():
    assert verdict(_row(100), _row(101.5), 2.0) == (pytest.approx(1.5), 2.0, SAME)
    assert verdict(_row(100), _row(103), 2.0)[2] == SLOWER
    assert verdict(_row(100), _row(97), 2.0)[2] == FASTER


def test_verdict_widens_the_threshold_for_noisy_steps():
    # sd 10 ms over 4 steps each: se of the difference = sqrt(2 * 100 / 4) = 7.07 ms
    change, threshold, word = verdict(_row(100, 10, 4), _row(110, 10, 4), 2.0)
    assert threshold == pytest.approx(2 * 7.0711, rel=1e-3)
    assert (change, word) == (pytest.approx(10.0), SAME)


def test_verdict_needs_a_step_time():
    with pytest.raises(TracekitError, match="no step time"):
        verdict(_row(float("nan")), _row(1.0), 2.0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Variant directories: base, the same again, and a 50% slower one (steps stretched)."""
    root = tmp_path_factory.mktemp("compare")
    return {
        "base": write_variant(root / "base" / "overlap", "overlap", evil=False),
        "same": write_variant(root / "same" / "overlap", "overlap", evil=False),
        "slow": write_variant(root / "slow" / "overlap", "overlap", slow=1.5, evil=False),
    }


def test_compare_variants_side_by_side(run_dir: Path):  # noqa: F811
    a, b = analyze([run_dir / "naive"]), analyze([run_dir / "overlap"])
    result = compare(a, b, a_label="naive dir", b_label="overlap dir")
    (pair,) = result.pairs
    assert (pair.a, pair.b, pair.verdict) == ("naive", "overlap", FASTER)
    assert pair.change_pct == pytest.approx(100 * (0.680 - 0.870) / 0.870)
    rows = {r[0]: r for r in pair.rows()}
    assert rows["overlap (%)"][1] == 0 and rows["overlap (%)"][2] > 70
    assert rows["ms per step"][3] == pytest.approx(0.680 - 0.870)
    text = to_text(result)
    assert "A: naive dir" in text and "verdict: overlap is 21.8% faster than naive" in text


def test_two_runs_pair_variants_by_name(tmp_path: Path):
    one = analyze([write_run(tmp_path / "one", steps=3)])
    two = analyze([write_run(tmp_path / "two", variants=("overlap", "naive", "x"), steps=3)])
    assert pair_groups(one, two, "one", "two") == [("naive", "naive"), ("overlap", "overlap")]
    lone = analyze([write_run(tmp_path / "three", variants=("bucketed", "flat"), steps=3)])
    with pytest.raises(TracekitError, match="nothing to pair"):
        pair_groups(one, lone, "one", "three")


def test_gate_counts_only_slowdowns_beyond_the_limit(runs):
    base, slow = analyze([runs["base"]]), analyze([runs["slow"]])
    result = compare(base, slow, fail_above=10)
    assert result.pairs[0].verdict == SLOWER
    assert result.pairs[0].change_pct == pytest.approx(50, abs=1)
    assert [p.b for p in result.regressions()] == ["overlap"]
    assert compare(base, slow, fail_above=60).regressions() == []
    assert compare(slow, base, fail_above=10).regressions() == []  # faster is fine
    assert compare(base, slow).regressions() == []  # no gate
    doc = to_dict(result)
    assert doc["regressed"] is True and doc["pairs"][0]["verdict"] == "slower"
    json.dumps(doc, allow_nan=False)


def test_relabel_and_combine_keep_groups_apart(runs):
    a = relabel(analyze([runs["base"]]), "A · ")
    b = relabel(analyze([runs["same"]]), "B · ")
    both = combine([a, b])
    assert both.groups == ["A · overlap", "B · overlap"]
    assert set(both.ranks["group"]) == {"A · overlap", "B · overlap"}
    assert len(both.steps) == len(a.steps) + len(b.steps)


# --- CLI -----------------------------------------------------------------------------------


def _run(*args: str):
    return CliRunner().invoke(main, ["compare", *args])


def test_cli_exit_status_gates_on_fail_above(runs):
    base, same, slow = (str(runs[k]) for k in ("base", "same", "slow"))
    slower = _run(base, slow, "--fail-above", "10")
    assert slower.exit_code == 1, slower.output
    assert "FAIL: slower than A by more than 10%" in slower.stdout
    assert _run(base, slow, "--fail-above", "75").exit_code == 0
    assert _run(slow, base, "--fail-above", "10").exit_code == 0
    unchanged = _run(base, same, "--fail-above", "0.5")
    assert unchanged.exit_code == 0
    assert "as fast as" in unchanged.stdout and "PASS" in unchanged.stdout
    assert _run(base, slow).exit_code == 0  # without --fail-above nothing fails


def test_cli_json(runs):
    result = _run(str(runs["base"]), str(runs["slow"]), "--format", "json", "--noise", "5")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["noise_pct"] == 5 and doc["pairs"][0]["verdict"] == "slower"


def test_cli_writes_the_comparison_into_a_report(run_dir: Path, tmp_path: Path):  # noqa: F811
    out = tmp_path / "compare.html"
    result = _run(str(run_dir / "naive"), str(run_dir / "overlap"), "-o", str(out))
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert 'id="comparison"' in text and "A · naive" in text and "B · overlap" in text
    assert "faster than naive" in text
    assert EVIL not in text
    again = _run(str(run_dir / "naive"), str(run_dir / "overlap"), "-o", str(out))
    assert again.exit_code == 2 and "already exists" in again.stderr


def test_cli_bad_input_is_one_line_and_exit_2(runs, tmp_path: Path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "rank-0.trace.json.gz").write_bytes(b"\x1f\x8bnot really")
    for b in (str(tmp_path / "missing"), str(broken)):
        result = _run(str(runs["base"]), b, "--fail-above", "5")
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tracekit: error: ")


def test_cli_partial_input_refuses_to_compare(runs, tmp_path: Path):
    partial = write_variant(tmp_path / "partial", "overlap", ranks=1, evil=False)
    (partial / "rank-1.trace.json.gz").write_text("{}")
    result = _run(str(runs["base"]), str(partial), "--fail-above", "50")
    assert result.exit_code == 2
    assert "not comparing" in result.stderr
