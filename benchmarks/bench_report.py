"""Report and timeline: file size, and load-to-render and zoom times in headless Chromium.

Inputs: the largest shared trace (../shared/traces/chrome/multi_stream_nccl) and a generated
trace of 200k kernels (seeded; overlap-DDP-like: compute kernels, NCCL buckets during
backward, copies), written to a temporary directory.

    .venv/bin/python benchmarks/bench_report.py [--kernels 200000] [--ranks 2] [--repeat 3]

"load-to-render" is from navigation start to every figure drawn (``window.tracekit.renderMs``),
the median of --repeat loads in a fresh page; "zoom" is one relayout to a step (and to a 1/200
slice of it) until the timeline has been redrawn from all its intervals.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser import CHROMIUM_ARGS, chromium_executable, unavailable  # noqa: E402
from tracekit.analysis import analyze  # noqa: E402
from tracekit.report import html, sections  # noqa: E402
from tracekit.report.manifest import read_records  # noqa: E402

SHARED = ROOT.parent / "shared" / "traces" / "chrome" / "multi_stream_nccl"
HOST = 4242
COMPUTE_STREAM, COPY_STREAM, COMM_STREAM = 7, 13, 20
SIZE_TARGET_MB, RENDER_TARGET_S = 5.0, 3.0


# --- the generated trace -------------------------------------------------------------------


def _kernel_names(rng: np.random.Generator, n: int = 300) -> list[str]:
    """Realistic-looking kernel names, some as long as templated CUDA ones."""
    stems = ["sm90_xmma_gemm_bf16bf16_bf16f32", "void at::native::elementwise_kernel",
             "void at::native::vectorized_elementwise_kernel", "flash_fwd_kernel",
             "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", "void cutlass::Kernel2",
             "triton_poi_fused_add_mul", "triton_red_fused_native_layer_norm",
             "void at::native::reduce_kernel", "ampere_sgemm_128x64_tn"]  # fmt: skip
    names = []
    for i in range(n):
        stem = stems[i % len(stems)]
        tail = "".join(rng.choice(list("abcdefghijklmnop0123456789_<>,:"), rng.integers(8, 180)))
        names.append(f"{stem}<{i}, {tail}>")
    return names


def _rank_events(rank: int, kernels: int, steps: int, seed: int) -> list[dict[str, Any]]:
    """One rank: per step forward, backward (with NCCL all-reduce buckets) and optimizer."""
    rng = np.random.default_rng(seed * 1000 + rank)
    names = _kernel_names(np.random.default_rng(seed))
    per_step = kernels // steps
    buckets = 25
    copies = per_step // 50
    compute = per_step - buckets - copies
    events: list[dict[str, Any]] = []
    t = 1_000.0
    corr = 1
    for step in range(1, steps + 1):
        step_start = t
        dur = np.clip(rng.lognormal(np.log(6.0), 1.0, compute), 0.5, 3_000.0)
        gap = rng.exponential(2.0, compute)
        start = t + np.concatenate([[0.0], np.cumsum(dur + gap)[:-1]])
        end = start + dur
        which = rng.integers(0, len(names), compute)
        fwd_end = start[compute // 3]
        bwd_end = start[int(compute * 0.9)]
        # NCCL buckets: during backward, one after another on the comm stream
        b_start = np.sort(rng.uniform(fwd_end + 1_000, bwd_end, buckets))
        b_dur = rng.uniform(200.0, 900.0, buckets)
        b_start = np.maximum.accumulate(np.maximum(b_start, np.r_[0, (b_start + b_dur)[:-1]]))
        c_start = np.sort(rng.uniform(start[0], end[-1], copies))
        c_dur = rng.uniform(1.0, 20.0, copies)
        nccl, copy = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "Memcpy DtoD (Device -> Device)"
        rows = [
            *(("kernel", names[w], COMPUTE_STREAM, s, d)
              for w, s, d in zip(which, start, dur, strict=True)),
            *(("kernel", nccl, COMM_STREAM, s, d) for s, d in zip(b_start, b_dur, strict=True)),
            *(("gpu_memcpy", copy, COPY_STREAM, s, d)
              for s, d in zip(c_start, c_dur, strict=True)),
        ]  # fmt: skip
        for cat, name, stream, s, d in rows:
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                           "pid": HOST, "tid": HOST, "ts": round(s - 3.0, 3), "dur": 0.5,
                           "args": {"correlation": corr}})  # fmt: skip
            args = {"stream": stream, "correlation": corr, "device": 0}
            events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream,
                           "ts": round(s, 3), "dur": round(d, 3), "args": args})  # fmt: skip
            corr += 1
        t_end = max(end[-1], (b_start + b_dur)[-1]) + 5
        for name, lo, hi in (("forward", step_start - 4, fwd_end - 3.5),
                             ("backward", fwd_end - 3.5, bwd_end - 3.5),
                             ("optimizer", bwd_end - 3.5, t_end)):  # fmt: skip
            events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": HOST,
                           "tid": HOST, "ts": round(lo, 3), "dur": round(hi - lo, 3)})  # fmt: skip
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                       "pid": HOST, "tid": HOST, "ts": round(step_start - 5, 3),
                       "dur": round(t_end - step_start + 5, 3)})  # fmt: skip
        t = t_end + 50
    return events


def generate(directory: Path, kernels: int, ranks: int, steps: int, seed: int) -> Path:
    """Write ``rank-<r>.trace.json.gz`` for ``ranks`` ranks, ``kernels`` kernels in all."""
    directory.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        doc = {
            "schemaVersion": 1,
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": ranks},
            "traceEvents": _rank_events(rank, kernels // ranks, steps, seed),
        }
        with gzip.open(directory / f"rank-{rank}.trace.json.gz", "wt", compresslevel=1) as fh:
            json.dump(doc, fh)
    return directory


# --- measuring -----------------------------------------------------------------------------


def _timed(what: Callable[[], Any]) -> tuple[Any, float]:
    began = time.perf_counter()
    out = what()
    return out, time.perf_counter() - began


def _browser_times(browser: Any, path: Path, repeat: int) -> dict[str, float]:
    """Median load-to-render, and the redraw after zooming to a step and into it."""
    loads, zoom_step, zoom_in, bars = [], [], [], []
    for _ in range(repeat):
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        errors: list[str] = []
        page.on("console", lambda m, e=errors: e.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda x, e=errors: e.append(str(x)))
        page.goto(path.resolve().as_uri())
        page.wait_for_function("window.tracekit && window.tracekit.rendered", timeout=120_000)
        loads.append(page.evaluate("window.tracekit.renderMs") / 1e3)
        step_ms, in_ms, n = page.evaluate(
            """async () => {
                const gd = document.querySelector('.tk-figure[id^="tk-timeline"]')
                         || document.querySelector('.tk-figure[id^="tk-step"]');
                const t = gd.data.find(t => t.meta === 'tracekit:step');
                const j = Math.floor(t.base.length / 2);
                const lo = t.base[j], hi = t.base[j] + t.x[j];
                async function zoom(a, b) {
                    const before = window.tracekit.redraws, began = performance.now();
                    await Plotly.relayout(gd, {'xaxis.range': [a, b]});
                    while (window.tracekit.redraws === before)
                        await new Promise(r => setTimeout(r, 5));
                    return performance.now() - began;
                }
                const s = await zoom(lo, hi);
                const i = await zoom(lo + (hi - lo) / 2, lo + (hi - lo) / 2 + (hi - lo) / 200);
                return [s, i, Number(gd.dataset.bars)];
            }"""
        )
        zoom_step.append(step_ms / 1e3)
        zoom_in.append(in_ms / 1e3)
        bars.append(n)
        if errors:
            raise RuntimeError(f"{path.name}: console errors: {errors[:3]}")
        page.close()
    return {
        "render_s": statistics.median(loads),
        "zoom_step_s": statistics.median(zoom_step),
        "zoom_in_s": statistics.median(zoom_in),
        "bars": bars[0],
    }


def bench(name: str, path: Path, out: Path, browser: Any, repeat: int = 3) -> list[dict[str, Any]]:
    analysis, t_analyze = _timed(lambda: analyze([path], keep_traces=True))
    kernels = sum(len(t.kernels) for ts in analysis.traces.values() for t in ts)
    variants = len(analysis.groups)
    rows = []
    for kind in ("report", "timeline"):
        target = out / f"{name}-{kind}.html"
        if kind == "report":
            page, t_build = _timed(
                lambda: sections.build_report(analysis, read_records([path]), inputs=[str(path)])
            )
            size, t_write = _timed(lambda p=page, t=target: html.write_report(t, p))
        else:
            page, t_build = _timed(lambda: sections.build_timeline_page(analysis))
            size, t_write = _timed(lambda p=page, t=target: html.write_timeline(t, p))
        row = {
            "input": name,
            "page": kind,
            "kernels": kernels,
            "analyze_s": t_analyze,
            "build_s": t_build + t_write,
            "size_mb": size / 1e6,
            "mb_per_variant": size / 1e6 / variants,
            "file": str(target),
        }
        if browser is not None:
            row |= _browser_times(browser, target, repeat)
        rows.append(row)
    return rows


def _print(rows: list[dict[str, Any]]) -> None:
    cols = [("input", "{}"), ("page", "{}"), ("kernels", "{:,}"), ("analyze_s", "{:.2f}"),
            ("build_s", "{:.2f}"), ("size_mb", "{:.2f}"), ("mb_per_variant", "{:.2f}"),
            ("render_s", "{:.2f}"), ("zoom_step_s", "{:.3f}"), ("zoom_in_s", "{:.3f}"),
            ("bars", "{}")]  # fmt: skip
    table = [[c for c, _ in cols]] + [
        [fmt.format(r[c]) if c in r else "-" for c, fmt in cols] for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(cols))]
    for line in table:
        print("  ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True)))
    print(
        f"\ntargets: report <= {SIZE_TARGET_MB:g} MB per variant, render < {RENDER_TARGET_S:g} s "
        "(render_s: navigation start to all figures drawn, median; zoom_*: one relayout until "
        "the timeline is redrawn from all intervals; bars: drawn after zooming in)"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kernels", type=int, default=200_000)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=3, help="page loads per file (median)")
    p.add_argument("--keep", type=Path, help="write inputs and pages here (default: temp dir)")
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="tracekit-bench-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        _, t_gen = _timed(
            lambda: generate(work / "generated", args.kernels, args.ranks, args.steps, args.seed)
        )
        print(f"generated {args.kernels:,} kernels over {args.ranks} rank(s) in {t_gen:.1f} s")
        inputs = [("generated", work / "generated")]
        if SHARED.is_dir():
            inputs.insert(0, ("multi_stream_nccl", SHARED))
        else:
            print(f"(no shared trace at {SHARED}; skipping it)")
        reason = unavailable()
        if reason:
            print(f"(no browser times: {reason})")
        browser = playwright = None
        if reason is None:
            from playwright.sync_api import sync_playwright

            playwright = sync_playwright().start()
            browser = playwright.chromium.launch(
                executable_path=chromium_executable(), args=list(CHROMIUM_ARGS)
            )
        try:
            rows = []
            for name, path in inputs:
                rows += bench(name, path, work, browser, args.repeat)
        finally:
            if browser is not None:
                browser.close()
                playwright.stop()
        _print(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
