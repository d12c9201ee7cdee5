"""A training run's timing record: summary figures, files on disk, the printed table.

Rank 0 writes, into the run directory, atomically (temp file + ``os.replace``):
    timing.json         everything: flags, model, environment, per-rank per-step figures, summary
    timing.csv          one row per (rank, measured step)
    timing-summary.csv  one row for the run: its results-table row, for concatenating runs
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from tracekit.atomic import write_text
from tracekit.contract import ALLREDUCE, TIMING_CSV, TIMING_JSON, TORCH_DDP
from tracekit.contract import TIMING_SUMMARY_CSV as SUMMARY_CSV
from workloads.step import StepTiming

RECORD_KIND = "tracekit.workloads.timing"
RECORD_VERSION = 2  # 2: allreduce_ms/_share_pct became allreduce_phase_ms/_share_pct

TIMING_COLUMNS = (
    "variant",
    "model_size",
    "world_size",
    "rank",
    "step",
    "step_ms",
    "allreduce_phase_ms",
    "allreduce_phase_share_pct",
    "allreduce_calls",
)
SUMMARY_COLUMNS = (
    "implementation",
    "model_size",
    "d_model",
    "num_layers",
    "world_size",
    "batch_size",
    "context_length",
    "ms_per_step",
    "allreduce_phase_ms",
    "allreduce_phase_share_pct",
    "allreduce_calls_per_step",
)
# Results table: (header, summary-row key, format). "allreduce phase" is the wall time of the
# workloads' ``allreduce`` range, never "comm": in tracekit, comm is communication kernel time.
TABLE = (
    ("implementation", "implementation", "{}"),
    ("model", "model_size", "{}"),
    ("ranks", "world_size", "{}"),
    ("ms/iter", "ms_per_step", "{:.2f}"),
    (f"{ALLREDUCE} phase ms", "allreduce_phase_ms", "{:.2f}"),
    (f"{ALLREDUCE} phase %", "allreduce_phase_share_pct", "{:.1f}"),
    ("all-reduce calls/step", "allreduce_calls_per_step", "{}"),
)

# Printed under the table for rows of these implementations.
TABLE_NOTES = {
    TORCH_DDP: f"{TORCH_DDP}: DDP waits for its all-reduces inside backward, so its "
    f"{ALLREDUCE} phase is ~0 ms; compare ms/iter.",
}


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 4)


def summarize(per_rank: Sequence[Sequence[StepTiming]]) -> dict:
    """Summary over the measured steps of every rank.

    ms_per_step: mean over steps of the slowest rank's step time (a step ends for the job
    when it ends on every rank). allreduce_phase_ms: mean over ranks and steps of the
    ``allreduce`` phase. allreduce_phase_share_pct: total ``allreduce`` phase time over total
    step time, all ranks.
    allreduce_calls_per_step: the calls of the last measured step (torch DDP rebuilds its
    buckets after its first step, so earlier steps can differ).
    """
    steps = list(zip(*per_rank, strict=True))  # steps[i] = step i on every rank
    if not steps:
        raise ValueError("no measured steps")
    slowest = [max(t.step_s for t in ranks) for ranks in steps]
    flat = [t for ranks in steps for t in ranks]
    total_step = sum(t.step_s for t in flat)
    total_phase = sum(t.allreduce_phase_s for t in flat)
    return {
        "ms_per_step": _ms(sum(slowest) / len(slowest)),
        "allreduce_phase_ms": _ms(total_phase / len(flat)),
        "allreduce_phase_share_pct": (
            round(100.0 * total_phase / total_step, 3) if total_step else 0.0
        ),
        "allreduce_calls_per_step": max(t.allreduce_calls for t in steps[-1]),
    }


def build_record(
    *,
    flags: dict,
    model: dict,
    strategy: dict,
    backend: str,
    world_size: int,
    environment: dict,
    ranks: Sequence[dict],
    per_rank: Sequence[Sequence[StepTiming]],
    traces: Sequence[str],
) -> dict:
    """The JSON record of one run. ``ranks[r]`` describes rank r (device, host)."""
    return {
        "kind": RECORD_KIND,
        "version": RECORD_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "variant": flags["variant"],
        "model_size": flags["model_size"],
        "world_size": world_size,
        "backend": backend,
        "flags": flags,
        "model": model,
        "strategy": strategy,
        "environment": environment,
        "steps": [t.step for t in per_rank[0]],
        "per_rank": [
            {
                **info,
                "step_ms": [_ms(t.step_s) for t in timings],
                "allreduce_phase_ms": [_ms(t.allreduce_phase_s) for t in timings],
                "allreduce_calls": [t.allreduce_calls for t in timings],
            }
            for info, timings in zip(ranks, per_rank, strict=True)
        ],
        "summary": summarize(per_rank),
        "traces": list(traces),
    }


def timing_rows(record: dict) -> list[dict]:
    """One CSV row per (rank, measured step) of ``record``."""
    rows = []
    for rank in record["per_rank"]:
        for step, total, phase, calls in zip(
            record["steps"],
            rank["step_ms"],
            rank["allreduce_phase_ms"],
            rank["allreduce_calls"],
            strict=True,
        ):
            rows.append(
                {
                    "variant": record["variant"],
                    "model_size": record["model_size"],
                    "world_size": record["world_size"],
                    "rank": rank["rank"],
                    "step": step,
                    "step_ms": total,
                    "allreduce_phase_ms": phase,
                    "allreduce_phase_share_pct": round(100.0 * phase / total, 3) if total else 0.0,
                    "allreduce_calls": calls,
                }
            )
    return rows


def summary_row(record: dict) -> dict:
    """The results-table row of ``record``."""
    return {
        "implementation": record["variant"],
        "model_size": record["model_size"],
        "d_model": record["model"]["d_model"],
        "num_layers": record["model"]["num_layers"],
        "world_size": record["world_size"],
        "batch_size": record["flags"]["batch_size"],
        "context_length": record["model"]["context_length"],
        **record["summary"],
    }


def results_table(rows: Sequence[dict]) -> str:
    """Fixed-width table of summary rows, one line per run."""
    cells = [[head for head, _, _ in TABLE]]
    cells += [[fmt.format(row[key]) for _, key, fmt in TABLE] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(TABLE))]

    def line(cells_of_row: list[str]) -> str:
        padded = [c.rjust(w) for c, w in zip(cells_of_row, widths, strict=True)]
        padded[0] = cells_of_row[0].ljust(widths[0])
        return "  ".join(padded)

    lines = [line(row) for row in cells]
    lines.insert(1, "-" * len(lines[0]))
    notes = {TABLE_NOTES[r["implementation"]] for r in rows if r["implementation"] in TABLE_NOTES}
    return "\n".join(lines + sorted(notes))


def csv_text(rows: Sequence[dict], columns: Sequence[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def write_record(out: Path, record: dict) -> list[Path]:
    """Write ``record`` as JSON and CSV into ``out``; return the paths written."""
    paths = [out / TIMING_JSON, out / TIMING_CSV, out / SUMMARY_CSV]
    write_text(paths[0], json.dumps(record, indent=2) + "\n")
    write_text(paths[1], csv_text(timing_rows(record), TIMING_COLUMNS))
    write_text(paths[2], csv_text([summary_row(record)], SUMMARY_COLUMNS))
    return paths
