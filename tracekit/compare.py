"""Two runs or variants side by side: their figures, the differences, and one decision.

"Slower" is measured on ms per step: the mean, over the headline steps, of the slowest rank's
step time (the variant summary). B's change is ``(B - A) / A`` in percent. It counts as a
change only beyond the noise threshold: the larger of ``noise_pct`` and twice the standard
error of the difference of the two means (from the step-to-step spread), as a percentage of A.

One rule (``Comparison.decision``) gives both the verdict text and the exit status: a variant
missing from, or failed in, either run fails it, naming the variant; so do runs made with
different settings when a gate (``fail_above``) is asked for, unless ``allow_mismatch``; then
a variant slower beyond the noise and beyond ``fail_above`` fails it. Figures are µs under
``analyze``'s column names.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from tracekit.analysis import Analysis
from tracekit.contract import VARIANTS as VARIANT_ORDER
from tracekit.errors import TracekitError
from tracekit.format import clean, number
from tracekit.load.discover import is_chrome, is_nsys
from tracekit.output import variants_frame, variants_of

DEFAULT_NOISE_PCT = 2.0
SLOWER, FASTER, SAME = "slower", "faster", "same"
# Exit statuses of a comparison (the CLI's: 0 ok, 1 slower beyond the gate, 2 incomplete).
PASSED, REGRESSED, INCOMPLETE = 0, 1, 2

# (analyze's column, label for people); "_pct" figures change in percentage points.
METRICS = (
    ("step_us", "ms per step"),
    ("compute_us", "compute ms per step"),
    ("comm_us", "comm ms per step"),
    ("comm_share_pct", "comm share (%)"),
    ("overlap_pct", "overlap (%)"),
    ("exposed_comm_us", "exposed comm ms per step"),
    ("idle_us", "idle ms per step"),
)
# Manifest settings that make two runs comparable: (where in the manifest, name shown).
SETTINGS = (
    (("settings", "model_size"), "model size"),
    (("settings", "nproc_per_node"), "processes per node"),
    (("settings", "nnodes"), "nodes"),
    (("settings", "steps"), "steps"),
    (("settings", "batch_size"), "batch size"),
    (("environment", "devices"), "device"),
    (("environment", "torch"), "torch version"),
)


@dataclass(frozen=True)
class RunInfo:
    """What one side's records say: variants it should hold, variants that failed, and the
    settings it was made with (empty when it has no manifest)."""

    expected: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)


def run_info(path: Path, manifest: Mapping[str, Any] | None, manifest_path: Path | None) -> RunInfo:
    """The RunInfo of input ``path`` from its run's manifest (``read_records``): a run directory
    expects the manifest's variants (and its known variant sub-directories); a variant
    directory expects itself."""
    path = Path(path)
    doc = manifest if isinstance(manifest, Mapping) else {}
    settings = {name: _setting(doc, where) for where, name in SETTINGS}
    settings = {k: v for k, v in settings.items() if v is not None}
    whole_run = manifest_path is not None and Path(manifest_path).parent == path
    section = doc.get("settings")
    listed = section.get("variants") if isinstance(section, Mapping) else None
    expected: list[str] = []
    if whole_run and isinstance(listed, list):
        expected += [v for v in listed if isinstance(v, str)]
    if path.is_dir() and not _holds_traces(path):
        expected += [d.name for d in _subdirs(path) if d.name in VARIANT_ORDER]
    failed_list = doc.get("failed_variants")
    failed = [v for v in failed_list if isinstance(v, str)] if isinstance(failed_list, list) else []
    if not whole_run:
        failed = [v for v in failed if v == path.name]
    return RunInfo(tuple(dict.fromkeys(expected)), tuple(failed), settings)


def _subdirs(directory: Path) -> list[Path]:
    try:
        return sorted(d for d in directory.iterdir() if d.is_dir())
    except OSError:
        return []


def _holds_traces(directory: Path) -> bool:
    try:
        return any(p.is_file() and (is_chrome(p) or is_nsys(p)) for p in directory.iterdir())
    except OSError:
        return False


def _setting(doc: Mapping[str, Any], where: tuple[str, str]) -> Any:
    section = doc.get(where[0])
    value = section.get(where[1]) if isinstance(section, Mapping) else None
    if isinstance(value, list):
        value = ", ".join(sorted({str(v) for v in value}))
    return value if isinstance(value, str | int | float | bool) else None


@dataclass(frozen=True)
class Pair:
    """One variant of A against one of B."""

    a: str  # group names
    b: str
    a_figures: dict[str, Any]  # variant summary rows, µs (``output.variants_frame``)
    b_figures: dict[str, Any]
    change_pct: float  # of ms per step, B against A
    threshold_pct: float  # the noise threshold the verdict used
    verdict: str  # SLOWER, FASTER or SAME

    def rows(self) -> list[tuple[str, float, float, float, float]]:
        """(column, A, B, B - A, change %) per metric; the change % is NaN for percentages."""
        out = []
        for column, _ in METRICS:
            a = _num(self.a_figures.get(column))
            b = _num(self.b_figures.get(column))
            delta = b - a
            pct = 100.0 * delta / a if not column.endswith("_pct") and a else math.nan
            out.append((column, a, b, delta, pct))
        return out

    def sentence(self) -> str:
        if self.verdict == SAME:
            return (
                f"{self.b} is as fast as {self.a}: ms per step changed by "
                f"{self.change_pct:+.1f}%, within the noise threshold of ±{self.threshold_pct:.1f}%"
            )
        return (
            f"{self.b} is {abs(self.change_pct):.1f}% {self.verdict} than {self.a} in ms per "
            f"step (noise threshold ±{self.threshold_pct:.1f}%)"
        )


@dataclass(frozen=True)
class Decision:
    """The outcome: the exit status and the sentence that says why."""

    status: int  # PASSED, REGRESSED or INCOMPLETE
    text: str


@dataclass(frozen=True)
class Comparison:
    a_label: str  # what A and B were (the paths given)
    b_label: str
    pairs: tuple[Pair, ...]
    noise_pct: float
    fail_above: float | None  # percent; None: no gate
    problems: tuple[str, ...] = ()  # lost data, each naming the variant or file
    mismatches: tuple[str, ...] = ()  # settings that differ between A and B
    notes: tuple[str, ...] = ()  # what was not checked
    allow_mismatch: bool = False

    def regressions(self) -> list[Pair]:
        """Pairs where B is slower than A beyond the noise and by more than ``fail_above``."""
        if self.fail_above is None:
            return []
        return [p for p in self.pairs if p.verdict == SLOWER and p.change_pct > self.fail_above]

    def decision(self) -> Decision:
        """The one rule behind both the verdict text and the exit status."""
        gated = self.fail_above is not None
        blocking = list(self.problems)
        if gated and self.mismatches and not self.allow_mismatch:
            blocking.append(
                "the runs were made with different settings ("
                + "; ".join(self.mismatches)
                + "); pass --allow-mismatch to gate across them"
            )
        if blocking:
            return Decision(INCOMPLETE, "FAIL: " + "; ".join(blocking))
        if not gated:
            return Decision(PASSED, "no gate: pass --fail-above PCT to fail on a slowdown")
        limit = f"{self.fail_above:g}%"
        bad = self.regressions()
        if bad:
            names = ", ".join(f"{p.b} (+{p.change_pct:.1f}%)" for p in bad)
            return Decision(REGRESSED, f"FAIL: slower than A by more than {limit}: {names}")
        noisy = [p for p in self.pairs if p.verdict == SAME and p.change_pct > self.fail_above]
        text = f"PASS: nothing is slower than A by more than {limit} beyond the noise"
        if noisy:
            text += (
                " (within the noise: "
                + ", ".join(f"{p.b} {p.change_pct:+.1f}% ±{p.threshold_pct:.1f}%" for p in noisy)
                + ")"
            )
        return Decision(PASSED, text)

    def side_by_side(self) -> list[tuple[Pair, list[tuple[str, ...]]]]:
        """Per pair, formatted rows (metric, A, B, B - A, change) for a report, in ms."""
        return [(p, [_cells(row) for row in p.rows()]) for p in self.pairs]

    def gate(self) -> str:
        """The decision's sentence (the report shows it)."""
        return self.decision().text


def _label(column: str) -> str:
    return dict(METRICS)[column]


def _cells(row: tuple[str, float, float, float, float]) -> tuple[str, ...]:
    column, a, b, delta, change = row
    pct = column.endswith("_pct")
    scale, digits = (1.0, 1) if pct else (1e-3, 3)
    return (
        _label(column),
        number(a, digits, scale=scale),
        number(b, digits, scale=scale),
        number(delta, digits, scale=scale, sign=True),
        number(change, 1, sign=True, suffix="%"),
    )


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def pair_groups(
    a: Analysis,
    b: Analysis,
    a_label: str,
    b_label: str,
    a_run: RunInfo | None = None,
    b_run: RunInfo | None = None,
) -> list[tuple[str, str]]:
    """Which group of A goes with which of B: the only one of each (when neither run should
    hold more), else those named alike (two run directories with the same variants)."""
    one_each = len(a.groups) == 1 and len(b.groups) == 1
    if one_each and len(_names(a, a_run)) == 1 and len(_names(b, b_run)) == 1:
        return [(a.groups[0], b.groups[0])]
    common = [g for g in a.groups if g in b.groups]
    if not common:
        raise TracekitError(
            f"nothing to pair: A has {', '.join(a.groups) or 'nothing'}; B has "
            f"{', '.join(b.groups) or 'nothing'} (pass one variant directory each, or two runs "
            "with the same variants)",
            b_label,
        )
    return [(g, g) for g in common]


def verdict(a: dict[str, Any], b: dict[str, Any], noise_pct: float) -> tuple[float, float, str]:
    """(change %, threshold %, verdict) of B's ms per step (``step_us``) against A's."""
    ma, mb = _num(a.get("step_us")), _num(b.get("step_us"))
    if not (ma > 0 and mb >= 0):
        raise TracekitError(f"no step time to compare for {a['group']} and {b['group']} "
                            "(the traces need step ranges such as ProfilerStep#N)")  # fmt: skip
    change = 100.0 * (mb - ma) / ma
    se = math.sqrt(_var_of_mean(a) + _var_of_mean(b))
    threshold = max(noise_pct, 200.0 * se / ma if math.isfinite(se) else 0.0)
    if change > threshold:
        return change, threshold, SLOWER
    if change < -threshold:
        return change, threshold, FASTER
    return change, threshold, SAME


def _var_of_mean(row: dict[str, Any]) -> float:
    sd, n = _num(row.get("step_us_sd")), _num(row.get("steps"))
    return sd * sd / n if math.isfinite(sd) and n > 1 else 0.0


def variant_figures(analysis: Analysis) -> pd.DataFrame:
    """The variant summary in µs under analyze's column names."""
    return variants_frame(variants_of(analysis))


def _lost(side: str, analysis: Analysis, info: RunInfo, names: Sequence[str]) -> list[str]:
    """Problems of one side: each variant of ``names`` failed in or missing from it, and
    each unusable input."""
    tried = _tried(analysis)
    out = []
    for name in names:
        if name in info.failed:
            out.append(f"{name}: failed in {side} (its run's manifest says so)")
        elif name not in analysis.groups:
            if name in info.expected or name in tried:
                out.append(f"{name}: failed in {side} (no usable traces)")
            else:
                out.append(f"{name}: missing from {side}")
    out += [f"{side}: unusable input: {failure}" for failure in analysis.failures]
    return out


def _tried(analysis: Analysis) -> list[str]:
    """Directories (variants) of the inputs that could not be used."""
    return [f.path.parent.name for f in analysis.failures if f.path is not None]


def _names(analysis: Analysis, info: RunInfo | None) -> list[str]:
    """Every variant a side holds, should hold, or tried to hold."""
    info = info or RunInfo()
    return list(dict.fromkeys([*analysis.groups, *info.expected, *info.failed, *_tried(analysis)]))


def _mismatches(a: RunInfo, b: RunInfo, pairs: Sequence[Pair]) -> tuple[list[str], list[str]]:
    """(settings that differ, notes on what could not be checked)."""
    out, notes = [], []
    if not a.settings or not b.settings:
        which = " and ".join(s for s, i in (("A", a), ("B", b)) if not i.settings)
        notes.append(f"no manifest for {which}: settings not checked")
    for name in a.settings.keys() & b.settings.keys():
        if a.settings[name] != b.settings[name]:
            out.append(f"{name}: {a.settings[name]} in A, {b.settings[name]} in B")
    for p in pairs:
        ra, rb = p.a_figures.get("ranks"), p.b_figures.get("ranks")
        if ra != rb:
            name = p.a if p.a == p.b else f"{p.a} -> {p.b}"
            out.append(f"{name}: {ra} rank(s) in A, {rb} in B")
    order = {name: i for i, (_, name) in enumerate(SETTINGS)}
    return sorted(out, key=lambda m: order.get(m.split(":")[0], len(order))), notes


def compare(
    a: Analysis,
    b: Analysis,
    *,
    a_label: str = "A",
    b_label: str = "B",
    a_run: RunInfo | None = None,
    b_run: RunInfo | None = None,
    noise_pct: float = DEFAULT_NOISE_PCT,
    fail_above: float | None = None,
    allow_mismatch: bool = False,
) -> Comparison:
    """Compare every paired variant of ``a`` and ``b`` (see ``pair_groups``); variants and
    inputs lost on either side, and differing settings, go into the comparison's problems and
    mismatches."""
    a_run, b_run = a_run or RunInfo(), b_run or RunInfo()
    sa = variant_figures(a).set_index("group", drop=False)
    sb = variant_figures(b).set_index("group", drop=False)
    pairs = []
    paired = pair_groups(a, b, a_label, b_label, a_run, b_run)
    for ga, gb in paired:
        ra, rb = sa.loc[ga].to_dict(), sb.loc[gb].to_dict()
        change, threshold, word = verdict(ra, rb, noise_pct)
        pairs.append(Pair(ga, gb, ra, rb, change, threshold, word))
    if len(paired) == 1 and paired[0][0] != paired[0][1]:  # one variant each, any names
        names_a, names_b = [paired[0][0]], [paired[0][1]]
    else:
        names_a = names_b = list(dict.fromkeys(_names(a, a_run) + _names(b, b_run)))
    problems = _lost("A", a, a_run, names_a) + _lost("B", b, b_run, names_b)
    mismatches, notes = _mismatches(a_run, b_run, pairs)
    return Comparison(
        a_label,
        b_label,
        tuple(pairs),
        noise_pct,
        fail_above,
        problems=tuple(dict.fromkeys(problems)),
        mismatches=tuple(mismatches),
        notes=tuple(notes),
        allow_mismatch=allow_mismatch,
    )


def to_text(comparison: Comparison) -> str:
    """Figures side by side (ms), differences and the verdict of each pair; the settings that
    differ; then the decision."""
    blocks = [f"A: {comparison.a_label}", f"B: {comparison.b_label}", ""]
    for pair, rows in comparison.side_by_side():
        frame = pd.DataFrame(rows, columns=["", f"A {pair.a}", f"B {pair.b}", "B - A", "change"])
        blocks.append(f"== {pair.a} -> {pair.b} ==")
        blocks.append(frame.to_string(index=False))
        blocks.append(f"verdict: {pair.sentence()}")
        blocks.append("")
    blocks += [f"settings differ: {m}" for m in comparison.mismatches]
    blocks += [f"note: {n}" for n in comparison.notes]
    blocks += [f"problem: {p}" for p in comparison.problems]
    blocks.append(comparison.decision().text)
    return "\n".join(blocks).rstrip() + "\n"


def to_dict(comparison: Comparison) -> dict[str, Any]:
    """The comparison as JSON-ready data (figures in µs under analyze's column names)."""
    decision = comparison.decision()
    return {
        "a": comparison.a_label,
        "b": comparison.b_label,
        "measure": "step_us: mean over headline steps of the slowest rank's step time",
        "noise_pct": comparison.noise_pct,
        "fail_above_pct": comparison.fail_above,
        "allow_mismatch": comparison.allow_mismatch,
        "pairs": [
            {
                "a": p.a,
                "b": p.b,
                "change_pct": clean(p.change_pct),
                "threshold_pct": clean(p.threshold_pct),
                "verdict": p.verdict,
                "figures": [
                    {
                        "metric": m,
                        "a": clean(x),
                        "b": clean(y),
                        "delta": clean(d),
                        "change_pct": clean(c),
                    }
                    for m, x, y, d, c in p.rows()
                ],
            }
            for p in comparison.pairs
        ],
        "problems": list(comparison.problems),
        "mismatches": list(comparison.mismatches),
        "notes": list(comparison.notes),
        "regressed": bool(comparison.regressions()),
        "status": decision.status,
        "decision": decision.text,
    }


CSV_COLUMNS = ("a", "b", "metric", "a_value", "b_value", "delta", "change_pct", "verdict",
               "threshold_pct")  # fmt: skip


def to_csv(comparison: Comparison) -> str:
    """One row per pair and metric (µs, analyze's column names); the decision goes to stderr."""
    rows = [
        (p.a, p.b, m, x, y, d, c, p.verdict, p.threshold_pct)
        for p in comparison.pairs
        for m, x, y, d, c in p.rows()
    ]
    buf = io.StringIO()
    pd.DataFrame(rows, columns=list(CSV_COLUMNS)).to_csv(buf, index=False, float_format="%.3f")
    return buf.getvalue()


def relabel(analysis: Analysis, prefix: str) -> Analysis:
    """``analysis`` with every group renamed ``prefix + group``."""
    rename = {g: f"{prefix}{g}" for g in analysis.groups}

    def frame(f: pd.DataFrame) -> pd.DataFrame:
        return f.assign(group=f["group"].map(rename)) if "group" in f.columns else f

    return Analysis(
        ranks=frame(analysis.ranks),
        steps=frame(analysis.steps),
        phases=frame(analysis.phases),
        collectives=frame(analysis.collectives),
        matched=frame(analysis.matched),
        stragglers=frame(analysis.stragglers),
        notes=analysis.notes,
        failures=analysis.failures,
        traces={rename[g]: t for g, t in analysis.traces.items()},
        windows={(rename[g], r): w for (g, r), w in analysis.windows.items()},
        process_groups=frame(analysis.process_groups),
        mismatches=frame(analysis.mismatches),
    )


def combine(analyses: Sequence[Analysis]) -> Analysis:
    """One analysis holding the groups of all (their group names must differ)."""

    def cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
        kept = [f for f in frames if len(f)]
        return pd.concat(kept, ignore_index=True) if kept else frames[0]

    traces: dict = {}
    windows: dict = {}
    for a in analyses:
        traces.update(a.traces)
        windows.update(a.windows)
    return Analysis(
        ranks=cat([a.ranks for a in analyses]),
        steps=cat([a.steps for a in analyses]),
        phases=cat([a.phases for a in analyses]),
        collectives=cat([a.collectives for a in analyses]),
        matched=cat([a.matched for a in analyses]),
        stragglers=cat([a.stragglers for a in analyses]),
        notes=tuple(n for a in analyses for n in a.notes),
        failures=tuple(f for a in analyses for f in a.failures),
        traces=traces,
        windows=windows,
        process_groups=cat([a.process_groups for a in analyses]),
        mismatches=cat([a.mismatches for a in analyses]),
    )
