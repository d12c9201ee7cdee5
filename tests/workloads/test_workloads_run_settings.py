"""run_profiles.sh's settings (workloads.run_settings), checked in-process: every bad value is
refused with one line naming its flag or variable, and the defaults follow the machine."""

from __future__ import annotations

import json
import shlex

import pytest

from tracekit.contract import VARIANTS
from workloads import run_settings
from workloads.run_settings import SettingError, check_machine, check_syntax, complete


def parse(**over: str):
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in over.items()]
    return check_syntax(run_settings.build_parser().parse_args(argv))


@pytest.mark.parametrize(
    ("over", "words"),
    [
        ({"variants": "naive,naive"}, "variant 'naive' is named twice"),
        ({"variants": "naive,,flat"}, "unknown variant ''"),
        ({"variants": "nope"}, "unknown variant 'nope'"),
        ({"steps": "0"}, "--steps (TRACEKIT_STEPS) must be a whole number >= 1, got '0'"),
        ({"warmup_steps": "abc"}, "TRACEKIT_WARMUP_STEPS must be a whole number >= 0"),
        ({"warmup_steps": "-1"}, "TRACEKIT_WARMUP_STEPS must be a whole number >= 0"),
        ({"nproc": "2.5"}, "--nproc (TRACEKIT_NPROC) must be a whole number"),
        ({"nproc": "٣"}, "--nproc (TRACEKIT_NPROC) must be a whole number"),  # Arabic-Indic 3
        ({"batch_size": "0"}, "TRACEKIT_BATCH_SIZE must be"),
        ({"context_length": "x"}, "TRACEKIT_CONTEXT_LENGTH must be"),
        ({"bucket_mb": "inf"}, "TRACEKIT_BUCKET_MB must be a positive number"),
        ({"bucket_mb": "-1"}, "TRACEKIT_BUCKET_MB must be a positive number"),
        ({"nsys": "yes"}, "TRACEKIT_NSYS must be one of 0, 1, force"),
        ({"torch_profiler": "true"}, "TRACEKIT_TORCH_PROFILER must be one of 0, 1"),
        ({"nnodes": "2", "node_rank": "2"}, "NODE_RANK 2 must be below NNODES 2"),
        ({"master_port": "70000"}, "MASTER_PORT must be at most 65535"),
    ],
)
def test_bad_syntax_is_refused(over, words):
    with pytest.raises(SettingError) as caught:
        parse(**over)
    assert words in str(caught.value)


def test_bad_settings_that_need_torch_are_refused():
    for over, gpus, words in (
        ({"model_size": "huge"}, 0, "--model-size (TRACEKIT_MODEL_SIZE) must be one of"),
        ({"batch_size": "3"}, 0, "TRACEKIT_BATCH_SIZE 3 is not divisible by the world size 2"),
        ({"nproc": "2"}, 1, "--nproc (TRACEKIT_NPROC) 2 is more than the 1 GPU(s)"),
        ({"nproc": "9"}, 0, "9 is far more than the 2 CPU core(s) here (at most 8)"),
    ):
        with pytest.raises(SettingError) as caught:
            complete(parse(**over), gpus=gpus, cores=2)
        assert words in str(caught.value), over


def test_machine_limits():
    check_machine(8, gpus=8, cores=2)
    check_machine(8, gpus=0, cores=2)
    with pytest.raises(SettingError, match="more than the 8 GPU"):
        check_machine(9, gpus=8, cores=64)
    with pytest.raises(SettingError, match="far more than the 1 CPU core"):
        check_machine(5, gpus=0, cores=1)


def test_defaults_follow_the_machine():
    cpu = complete(parse(), gpus=0, cores=2)
    assert cpu.variants == VARIANTS
    assert (cpu.model_size, cpu.nproc_per_node, cpu.batch_size) == ("cpu", 2, 4)
    assert (cpu.context_length, cpu.bucket_mb, cpu.steps, cpu.warmup_steps) == (64, 1.0, 6, 2)
    gpu = complete(parse(variants="flat,naive", nnodes="2"), gpus=4, cores=2)
    assert gpu.variants == ("flat", "naive")
    assert (gpu.model_size, gpu.nproc_per_node, gpu.batch_size, gpu.bucket_mb) == (
        "xl",
        4,
        16,
        25.0,
    )
    assert cpu.nsys in ("nsys is not on PATH", "no GPU")
    assert complete(parse(nsys="0"), gpus=0, cores=2).nsys == "disabled (--no-nsys)"


def test_shell_assignments_round_trip():
    settings = complete(parse(variants="overlap", steps="3"), gpus=0, cores=2)
    lines = dict(line.split("=", 1) for line in settings.shell().splitlines())
    values = {k: shlex.split(v)[0] if v != "''" else "" for k, v in lines.items()}
    assert values["variants"] == "overlap" and values["steps"] == "3"
    manifest = json.loads(values["settings"])
    assert manifest["variants"] == ["overlap"] and manifest["nproc_per_node"] == 2
    assert manifest["warmup_steps"] == 2 and manifest["torch_profiler"] is True


def test_main_says_one_line_and_exits_2(capsys):
    assert run_settings.main(["--syntax-only", "--warmup-steps", "abc"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "run_profiles: error: TRACEKIT_WARMUP_STEPS must be a whole number >= 0, got 'abc'"
    ]
