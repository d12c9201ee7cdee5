"""Fast, single-process checks of the workloads' pure parts: model, data, buckets, records."""

from __future__ import annotations

import csv
import json
import re
from datetime import datetime
from pathlib import Path

import pytest
import torch

from tracekit import atomic, contract
from tracekit.config import AnalysisConfig
from tracekit.contract import VARIANTS
from tracekit.errors import TracekitError
from workloads import flags, phases, profiling, record
from workloads.config import TrainConfig
from workloads.data import global_batch, inputs_and_targets, rank_slice
from workloads.ddp import make_strategy, plan_buckets
from workloads.env import environment
from workloads.model import MODEL_SIZES, VOCAB_SIZE, TransformerLM, lm_loss
from workloads.step import StepTiming

TINY = MODEL_SIZES["tiny"]


def test_model_sizes_match_the_spec():
    expected = {
        "small": (768, 3072, 12, 12),
        "medium": (1024, 4096, 24, 16),
        "large": (1280, 5120, 36, 20),
        "xl": (1600, 6400, 48, 25),
        "2.7B": (2560, 10240, 32, 32),
    }
    for name, dims in expected.items():
        c = MODEL_SIZES[name]
        assert (c.d_model, c.d_ff, c.num_layers, c.num_heads) == dims
        assert c.vocab_size == VOCAB_SIZE == 10_000
    assert TINY.num_layers == 2
    assert MODEL_SIZES["cpu"].d_model == 256  # run_profiles.sh's CPU default


def test_model_is_causal_and_untied():
    torch.manual_seed(0)
    model = TransformerLM(TINY, context_length=16).eval()
    tokens = torch.randint(VOCAB_SIZE, (2, 16))
    changed = tokens.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % VOCAB_SIZE
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    assert a.shape == (2, 16, VOCAB_SIZE)
    torch.testing.assert_close(a[:, :10], b[:, :10])  # the past ignores the future
    assert not torch.allclose(a[:, 10:], b[:, 10:])
    assert model.lm_head.weight.data_ptr() != model.tok_emb.weight.data_ptr()
    # 2 embeddings + 8 tensors per block + final norm (2) + lm_head
    assert len(list(model.parameters())) == 2 + 8 * TINY.num_layers + 3


def test_model_has_no_dropout_and_is_deterministic():
    torch.manual_seed(1)
    model = TransformerLM(TINY, context_length=8)
    assert not any(isinstance(m, torch.nn.Dropout) for m in model.modules())
    tokens = torch.randint(VOCAB_SIZE, (2, 9))
    inputs, targets = inputs_and_targets(tokens, torch.device("cpu"))
    assert lm_loss(model(inputs), targets).item() == lm_loss(model(inputs), targets).item()


def test_batches_are_seeded_and_rank_slices_tile_the_global_batch():
    a = global_batch(3, 8, 16, VOCAB_SIZE, seed=7)
    assert torch.equal(a, global_batch(3, 8, 16, VOCAB_SIZE, seed=7))
    assert not torch.equal(a, global_batch(4, 8, 16, VOCAB_SIZE, seed=7))
    assert not torch.equal(a, global_batch(3, 8, 16, VOCAB_SIZE, seed=8))
    assert a.shape == (8, 17)
    assert torch.equal(torch.cat([rank_slice(a, r, 4) for r in range(4)]), a)
    with pytest.raises(ValueError, match="does not split"):
        rank_slice(a, 0, 3)
    inputs, targets = inputs_and_targets(a, torch.device("cpu"))
    assert torch.equal(inputs[:, 1:], targets[:, :-1])


def test_plan_buckets_by_hand():
    assert plan_buckets([4, 4, 4], cap=8) == [[0, 1], [2]]
    assert plan_buckets([10, 1, 1], cap=8) == [[0], [1, 2]]  # oversized item alone
    assert plan_buckets([3, 3, 3, 3], cap=100) == [[0, 1, 2, 3]]
    assert plan_buckets([], cap=8) == []


def test_plan_buckets_covers_every_item_once_in_order():
    gen = torch.Generator().manual_seed(0)
    sizes = [int(x) for x in torch.randint(1, 50, (200,), generator=gen)]
    buckets = plan_buckets(sizes, cap=120)
    assert [i for b in buckets for i in b] == list(range(len(sizes)))
    for b in buckets:
        assert len(b) == 1 or sum(sizes[i] for i in b) <= 120


def test_make_strategy_knows_every_variant():
    for variant in VARIANTS:
        assert make_strategy(variant, 1.0).name == variant
    with pytest.raises(ValueError, match="unknown variant"):
        make_strategy("nope", 1.0)


def test_phase_names_are_the_ones_tracekit_expects():
    assert contract.PHASES == ("forward", "backward", "allreduce", "optimizer")
    assert phases.step_name(12) == "step#12"
    with pytest.raises(ValueError):
        phases.phase("loss")


def test_analysis_patterns_are_built_from_the_contract():
    config = AnalysisConfig()
    for name in contract.PHASES:
        assert re.search(config.phase_pattern, name)
    assert re.search(config.phase_pattern, "## loss ##")
    assert not re.search(config.phase_pattern, "forwards")
    names = [phases.step_name(7), f"{contract.PROFILER_STEP_PREFIX}7"]
    for name in names:
        assert [re.search(p, name) for p in config.step_patterns].count(None) == 1
        assert next(m.group(1) for p in config.step_patterns if (m := re.search(p, name))) == "7"
    assert not any(re.search(p, "step#7a") for p in config.step_patterns)


def test_replacing_moves_the_file_in_only_when_written(tmp_path):
    target = tmp_path / "t.json.gz"
    target.write_text("old")
    with atomic.replacing(target, ".json.gz") as tmp:
        assert tmp.parent == tmp_path and tmp.name.endswith(".json.gz") and not tmp.exists()
        tmp.write_text("new")
    assert target.read_text() == "new"
    with pytest.raises(RuntimeError), atomic.replacing(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("writer failed")
    with pytest.raises(TracekitError, match="was not written"), atomic.replacing(target):
        pass
    assert target.read_text() == "new"
    with atomic.replacing(target, keep_existing=True) as tmp:
        tmp.write_text("theirs is kept")
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["t.json.gz"]  # no temp files left


def test_phases_emit_record_function_ranges():
    cpu = [torch.profiler.ProfilerActivity.CPU]
    with (
        torch.profiler.profile(activities=cpu) as prof,
        phases.step_range(5),
        phases.phase(contract.FORWARD),
    ):
        torch.ones(3).sum()
    names = {e.name for e in prof.events()}
    assert {"step#5", "forward"} <= names


def test_profile_schedule_records_exactly_the_measured_steps():
    assert profiling.profile_schedule(3, 10) == {"wait": 2, "warmup": 1, "active": 10, "repeat": 1}
    assert profiling.profile_schedule(0, 4) == {"wait": 0, "warmup": 0, "active": 4, "repeat": 1}
    assert profiling.trace_path(Path("x"), 3) == Path("x/rank-3.trace.json.gz")


def test_flags_parse_into_a_typed_config():
    config = flags.parse(["--variant=flat", "--steps=4", "--bucket-mb=0.5", "--out=x"], 2)
    assert config == TrainConfig(variant="flat", steps=4, bucket_mb=0.5, out=Path("x"))
    assert flags.parse([], 1) == TrainConfig()
    assert config.record()["out"] == "x"
    json.dumps(config.record())


def test_flag_problems_are_one_line():
    assert TrainConfig().problem(world_size=2) is None
    msg = TrainConfig(batch_size=3).problem(world_size=2)
    assert msg == "--batch-size 3 is not divisible by the world size 2"
    assert "--steps" in TrainConfig(steps=0).problem(1)
    assert "--bucket-mb" in TrainConfig(bucket_mb=0).problem(1)
    assert "--bucket-mb" in TrainConfig(bucket_mb=float("nan")).problem(1)
    assert "--model-size" in TrainConfig(model_size="huge").problem(1)
    with pytest.raises(flags.FlagError, match="invalid choice"):
        flags.parse(["--variant", "bogus"], 1)
    with pytest.raises(flags.FlagError, match="--warmup-steps must be at least 0"):
        flags.parse(["--warmup-steps=-1"], 1)
    stamp = datetime(2024, 1, 2, 3, 4, 5)
    assert flags.default_out(stamp) == Path("runs/train-20240102-030405")


def _timings(ms: list[float], comm: list[float], calls: int) -> list[StepTiming]:
    pairs = enumerate(zip(ms, comm, strict=True))
    return [StepTiming(i, t / 1e3, c / 1e3, calls) for i, (t, c) in pairs]


def test_summary_and_files(tmp_path):
    per_rank = [_timings([10, 20], [1, 2], 4), _timings([12, 18], [3, 4], 4)]
    s = record.summarize(per_rank)
    assert s["ms_per_step"] == pytest.approx((12 + 20) / 2)
    assert s["allreduce_phase_ms"] == pytest.approx(2.5)
    assert s["allreduce_phase_share_pct"] == pytest.approx(100 * 10 / 60, abs=1e-3)
    assert s["allreduce_calls_per_step"] == 4
    rec = record.build_record(
        flags={"variant": "flat", "model_size": "tiny", "batch_size": 4},
        model={"d_model": 64, "num_layers": 2, "context_length": 8},
        strategy={},
        backend="gloo",
        world_size=2,
        environment={"torch": torch.__version__},
        ranks=[{"rank": 0}, {"rank": 1}],
        per_rank=per_rank,
        traces=[],
    )
    record.write_record(tmp_path, rec)
    assert json.loads((tmp_path / record.TIMING_JSON).read_text())["summary"] == s
    rows = list(csv.DictReader((tmp_path / record.TIMING_CSV).open()))
    assert len(rows) == 4 and rows[3]["rank"] == "1" and rows[3]["step_ms"] == "18.0"
    assert not list(tmp_path.glob(".*tmp"))  # temp files were renamed away
    table = record.results_table([record.summary_row(rec)])
    header = table.splitlines()[0]
    assert "implementation" in header and "flat" in table.splitlines()[2]
    # tracekit's "comm" is communication kernel time; the workloads time the allreduce phase.
    assert "allreduce phase ms" in header and "allreduce phase %" in header
    assert "comm" not in table


def test_environment_is_json_ready():
    env = environment()
    json.dumps(env)
    assert env["torch"] == torch.__version__
    assert env["default_backend"] in ("gloo", "nccl")
