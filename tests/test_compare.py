"""compare: pairing, verdicts with a noise threshold, the CI gate, and the command."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.runs import (
    EVIL,
    write_run,
    write_variant,
)
from tracekit.analysis import analyze
from tracekit.cli import main
from tracekit.compare import (
    CSV_COLUMNS,
    FASTER,
    INCOMPLETE,
    PASSED,
    REGRESSED,
    SAME,
    SLOWER,
    Comparison,
    Pair,
    RunInfo,
    combine,
    compare,
    pair_groups,
    relabel,
    run_info,
    to_dict,
    to_text,
    verdict,
)
from tracekit.errors import TracekitError


def _row(step_ms: float, sd: float = float("nan"), steps: int = 3, group: str = "g") -> dict:
    """A variant summary row (µs, analyze's names) from ms figures."""
    return {"group": group, "step_us": step_ms * 1e3, "step_us_sd": sd * 1e3, "steps": steps}


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


def test_compare_variants_side_by_side(run_dir: Path):
    a, b = analyze([run_dir / "naive"]), analyze([run_dir / "overlap"])
    result = compare(a, b, a_label="naive dir", b_label="overlap dir")
    (pair,) = result.pairs
    assert (pair.a, pair.b, pair.verdict) == ("naive", "overlap", FASTER)
    assert pair.change_pct == pytest.approx(100 * (0.680 - 0.870) / 0.870)
    rows = {r[0]: r for r in pair.rows()}
    assert rows["overlap_pct"][1] == 0 and rows["overlap_pct"][2] > 70
    assert rows["step_us"][3] == pytest.approx(680 - 870)
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


def test_cli_writes_the_comparison_into_a_report(run_dir: Path, tmp_path: Path):
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


def test_cli_partial_input_fails_naming_the_file(runs, tmp_path: Path):
    partial = write_variant(tmp_path / "partial", "overlap", ranks=1, evil=False)
    (partial / "rank-1.trace.json.gz").write_text("{}")
    result = _run(str(runs["base"]), str(partial), "--fail-above", "50")
    assert result.exit_code == 2
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("FAIL: B: unusable input: ") and "rank-1.trace.json.gz" in last


# --- variants lost on either side, settings that differ, one rule for text and status ------


def _manifest(root: Path, variants, failed=(), **settings) -> None:
    """A run_profiles.sh-style manifest for ``root``."""
    doc = {
        "status": "failed" if failed else "complete",
        "settings": {
            "variants": list(variants),
            "model_size": "tiny",
            "nproc_per_node": 2,
            "steps": 4,
            "batch_size": 8,
        }
        | settings,
        "failed_variants": list(failed),
        "environment": {"torch": "2.13.0", "devices": ["cpu"]},
    }
    (root / "manifest.json").write_text(json.dumps(doc))


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete run (naive, overlap) with a manifest."""
    root = write_run(tmp_path_factory.mktemp("full") / "run", evil=False)
    _manifest(root, ("naive", "overlap"))
    return root


def _status_and_last_line(*args: str) -> tuple[int, str]:
    result = _run(*args)
    return result.exit_code, result.stdout.strip().splitlines()[-1]


def test_a_variant_missing_from_b_fails_naming_it(both: Path, tmp_path: Path):
    b = write_run(tmp_path / "b", variants=("naive",), manifest=False, evil=False)
    for gate in ((), ("--fail-above", "5")):
        code, last = _status_and_last_line(str(both), str(b), *gate)
        assert (code, last) == (2, "FAIL: overlap: missing from B"), last
    code, last = _status_and_last_line(str(b), str(both), "--fail-above", "5")
    assert (code, last) == (2, "FAIL: overlap: missing from A")


def test_a_variant_failed_in_b_fails_even_when_the_rest_is_faster(both: Path, tmp_path: Path):
    """B's overlap failed with no traces (the manifest says so, the directory is empty); its
    naive is identical. Before: "PASS: nothing is slower", exit 0."""
    b = write_run(tmp_path / "b", variants=("naive",), manifest=False, evil=False)
    (b / "overlap").mkdir()
    _manifest(b, ("naive", "overlap"), failed=("overlap",))
    code, last = _status_and_last_line(str(both), str(b), "--fail-above", "5")
    assert code == 2 and last.startswith("FAIL: overlap: failed in B"), last
    doc = json.loads(_run(str(both), str(b), "--format", "json").stdout)
    assert doc["status"] == 2 and doc["problems"][0].startswith("overlap: failed in B")
    assert [p["a"] for p in doc["pairs"]] == ["naive"]


def test_a_variant_without_traces_fails_without_a_manifest(both: Path, tmp_path: Path):
    a = write_run(tmp_path / "a", variants=("naive",), manifest=False, evil=False)
    (a / "overlap").mkdir()  # the variant ran and left nothing
    code, last = _status_and_last_line(str(a), str(both))
    assert (code, last) == (2, "FAIL: overlap: failed in A (no usable traces)")


def test_a_lost_rank_fails_naming_the_file(both: Path, tmp_path: Path):
    b = write_run(tmp_path / "b", evil=False)
    bad = b / "overlap" / "rank-1.trace.json.gz"
    bad.write_bytes(b"not a trace")
    result = _run(str(both), str(b), "--fail-above", "5")
    assert result.exit_code == 2
    assert str(bad) in result.stdout.strip().splitlines()[-1]
    assert str(bad) in result.stderr  # and the usual one line per unusable input


def test_settings_that_differ_are_flagged_and_gate_only_with_allow_mismatch(
    both: Path, tmp_path: Path
):
    b = write_run(tmp_path / "b", manifest=False, evil=False)
    _manifest(b, ("naive", "overlap"), model_size="cpu")
    plain = _run(str(both), str(b))
    assert plain.exit_code == 0, plain.output
    assert "settings differ: model size: tiny in A, cpu in B" in plain.stdout
    code, last = _status_and_last_line(str(both), str(b), "--fail-above", "5")
    assert code == 2 and "different settings (model size: tiny in A, cpu in B)" in last
    assert "--allow-mismatch" in last
    allowed = _run(str(both), str(b), "--fail-above", "5", "--allow-mismatch")
    assert allowed.exit_code == 0 and "settings differ: model size" in allowed.stdout
    assert allowed.stdout.strip().splitlines()[-1].startswith("PASS")


def test_rank_counts_that_differ_are_a_mismatch(runs, tmp_path: Path):
    one = write_variant(tmp_path / "one" / "overlap", "overlap", ranks=1, evil=False)
    result = compare(analyze([runs["base"]]), analyze([one]), fail_above=5)
    assert result.mismatches == ("overlap: 2 rank(s) in A, 1 in B",)
    assert result.decision().status == INCOMPLETE
    assert "no manifest for A and B" in result.notes[0]


def test_run_info_reads_the_manifest(both: Path, tmp_path: Path):
    info = run_info(both, json.loads((both / "manifest.json").read_text()), both / "manifest.json")
    assert info.expected == ("naive", "overlap") and info.failed == ()
    assert info.settings["model size"] == "tiny" and info.settings["torch version"] == "2.13.0"
    # a variant directory of a run expects only itself
    doc = {"failed_variants": ["naive"], "settings": {"variants": ["naive", "overlap"]}}
    assert run_info(both / "overlap", doc, both / "manifest.json") == RunInfo((), (), {})
    assert run_info(both / "naive", doc, both / "manifest.json").failed == ("naive",)
    hostile = {"settings": "x", "failed_variants": "naive", "environment": [1]}
    assert run_info(tmp_path, hostile, tmp_path / "manifest.json") == RunInfo()


def _pair(change: float, threshold: float) -> Pair:
    word = SLOWER if change > threshold else FASTER if change < -threshold else SAME
    return Pair("a", "b", {}, {}, change, threshold, word)


@pytest.mark.parametrize("fail_above", [None, 0.0, 5.0, 50.0])
@pytest.mark.parametrize("change", [-60.0, -3.0, 0.0, 3.0, 6.0, 49.0, 60.0])
@pytest.mark.parametrize("threshold", [2.0, 90.3])
@pytest.mark.parametrize("problems", [(), ("overlap: missing from B",)])
def test_one_rule_decides_text_and_status(fail_above, change, threshold, problems):
    """The verdict text and the exit status never disagree. Before: "as fast as naive
    (within the noise threshold of ±90.3%)" and then exit 1 under --fail-above 5."""
    pair = _pair(change, threshold)
    decision = Comparison("A", "B", (pair,), 2.0, fail_above, problems=problems).decision()
    if problems:
        assert decision.status == INCOMPLETE and decision.text.startswith("FAIL: overlap")
    elif decision.status == REGRESSED:
        assert pair.verdict == SLOWER and "slower than" in pair.sentence()
        assert decision.text.startswith("FAIL: slower than A")
    else:
        assert decision.status == PASSED
        assert decision.text.startswith(("PASS", "no gate"))
        assert fail_above is None or not (pair.verdict == SLOWER and change > fail_above)
    assert (decision.status == REGRESSED) == (
        not problems and fail_above is not None and pair.verdict == SLOWER and change > fail_above
    )


def test_within_the_noise_passes_and_says_so():
    decision = Comparison("A", "B", (_pair(6.0, 90.3),), 2.0, 5.0).decision()
    assert decision.status == PASSED
    assert "within the noise: b +6.0% ±90.3%" in decision.text


def test_cli_json_and_csv_use_analyze_units_and_names(run_dir: Path):
    a, b = str(run_dir / "naive"), str(run_dir / "overlap")
    result = _run(a, b, "--format", "json", "--fail-above", "5")
    doc = json.loads(result.stdout)
    assert result.exit_code == doc["status"] == 0
    figures = {f["metric"]: f for f in doc["pairs"][0]["figures"]}
    assert set(figures) == {"step_us", "compute_us", "comm_us", "comm_share_pct",
                            "overlap_pct", "exposed_comm_us", "idle_us"}  # fmt: skip
    assert figures["step_us"]["a"] == pytest.approx(870.0)
    assert figures["step_us"]["b"] == pytest.approx(680.0)
    assert result.stderr.strip() == f"tracekit: {doc['decision']}"
    csv_run = _run(a, b, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(csv_run.stdout)))
    assert csv_run.exit_code == 0 and len(rows) == 7
    assert tuple(rows[0]) == CSV_COLUMNS
    assert rows[0]["metric"] == "step_us" and float(rows[0]["a_value"]) == pytest.approx(870)
