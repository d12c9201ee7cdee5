#!/usr/bin/env bash
# Profile every DDP variant under torch.profiler and Nsight Systems into one run directory,
# then analyse it and write the HTML report.
#
#   ./run_profiles.sh [--out DIR] [--variants naive,flat,overlap,bucketed,torch_ddp]
#                     [--model-size S] [--steps N] [--nproc N] [--no-nsys] [--no-torch-profiler]
#
# Every setting also has an environment default (flags win):
#   TRACEKIT_OUT             run directory                    runs/<timestamp>
#   TRACEKIT_VARIANTS        variants, comma-separated        naive,flat,overlap,bucketed,torch_ddp
#   TRACEKIT_MODEL_SIZE      model size                       xl with GPUs, cpu without
#   TRACEKIT_STEPS           measured (profiled) steps        6
#   TRACEKIT_WARMUP_STEPS    unmeasured steps before them     2
#   TRACEKIT_NPROC           processes on this node           every GPU, or 2 CPU ranks
#   TRACEKIT_BATCH_SIZE      global batch                     2 per process
#   TRACEKIT_CONTEXT_LENGTH  tokens per sequence              128 with GPUs, 64 without
#   TRACEKIT_BUCKET_MB       bucket size (bucketed, torch_ddp) 25 with GPUs, 1 without
#   TRACEKIT_NSYS            1: also profile under nsys       1
#                            when it and a GPU are present; 0: never; force: whenever nsys is
#                            on PATH (to check the wiring with a stand-in nsys)
#   TRACEKIT_TORCH_PROFILER  1: profile under torch.profiler  1
#   NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT are passed to torchrun (default: one node,
#   127.0.0.1 and a free port, so two runs on one machine don't collide).
#
# Layout: DIR/manifest.json, DIR/<variant>/{rank-<r>.trace.json.gz, timing.json, train.log,
# profile.nsys-rep, nsys.log}, DIR/summary.{json,csv}, DIR/report.html. DIR/INCOMPLETE exists
# while the run is going and stays if it is interrupted.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
all_variants="naive,flat,overlap,bucketed,torch_ddp"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "run_profiles: error: $*" >&2; exit 2; }

out="${TRACEKIT_OUT:-}"
variants="${TRACEKIT_VARIANTS:-$all_variants}"
model_size="${TRACEKIT_MODEL_SIZE:-}"
steps="${TRACEKIT_STEPS:-6}"
warmup="${TRACEKIT_WARMUP_STEPS:-2}"
nproc="${TRACEKIT_NPROC:-}"
batch="${TRACEKIT_BATCH_SIZE:-}"
context="${TRACEKIT_CONTEXT_LENGTH:-}"
bucket_mb="${TRACEKIT_BUCKET_MB:-}"
use_nsys="${TRACEKIT_NSYS:-1}"
use_torch_profiler="${TRACEKIT_TORCH_PROFILER:-1}"

while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --out) out="${2:?--out needs a directory}"; shift 2 ;;
        --variants) variants="${2:?--variants needs a list}"; shift 2 ;;
        --model-size) model_size="${2:?--model-size needs a size}"; shift 2 ;;
        --steps) steps="${2:?--steps needs a number}"; shift 2 ;;
        --nproc) nproc="${2:?--nproc needs a number}"; shift 2 ;;
        --no-nsys) use_nsys=0; shift ;;
        --no-torch-profiler) use_torch_profiler=0; shift ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done

IFS=, read -r -a variant_list <<< "$variants"
for v in "${variant_list[@]}"; do
    [[ ",$all_variants," == *",$v,"* ]] || die "unknown variant '$v' (choose from $all_variants)"
done
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || die "--steps must be a positive integer, got '$steps'"
[[ -z "$nproc" || "$nproc" =~ ^[1-9][0-9]*$ ]] || die "--nproc must be a positive integer"

"$repo/scripts/bootstrap.sh" || die "could not set up $repo/.venv"
py="$repo/.venv/bin/python"
tk="$repo/.venv/bin/tracekit"

gpus="$("$py" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)')"
if [[ "$gpus" -gt 0 ]]; then
    nproc="${nproc:-$gpus}"; model_size="${model_size:-xl}"
    context="${context:-128}"; bucket_mb="${bucket_mb:-25}"
else
    # On CPU the default model is sized so backward takes about as long as the all-reduces:
    # then naive, flat and overlap differ visibly in the measured overlap.
    nproc="${nproc:-2}"; model_size="${model_size:-cpu}"
    context="${context:-64}"; bucket_mb="${bucket_mb:-1}"
fi
batch="${batch:-$((2 * nproc * ${NNODES:-1}))}"

if [[ -z "$out" ]]; then
    out="$repo/runs/$(date +%Y%m%d-%H%M%S)"
    while [[ -e "$out" ]]; do out="$out-$RANDOM"; done
elif [[ -e "$out" ]]; then
    die "$out already exists; choose a new --out (runs are never overwritten)"
fi
mkdir -p "$out" || die "cannot create $out"
out="$(cd "$out" && pwd)"
echo "started $(date -Is)" > "$out/INCOMPLETE"

nsys_reason=""
if [[ "$use_nsys" == 0 ]]; then nsys_reason="disabled (--no-nsys)"
elif ! command -v nsys >/dev/null 2>&1; then nsys_reason="nsys is not on PATH"
elif [[ "$gpus" -eq 0 && "$use_nsys" != force ]]; then nsys_reason="no GPU"
fi
[[ -n "$nsys_reason" ]] && echo "run_profiles: skipping Nsight Systems: $nsys_reason" >&2

master_port="${MASTER_PORT:-$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
torchrun=("$repo/.venv/bin/torchrun" --nnodes "${NNODES:-1}" --node-rank "${NODE_RANK:-0}"
          --nproc-per-node "$nproc" --master-addr "${MASTER_ADDR:-127.0.0.1}"
          --master-port "$master_port")
train=(-m workloads.train --model-size "$model_size" --steps "$steps" --warmup-steps "$warmup"
       --batch-size "$batch" --context-length "$context" --bucket-mb "$bucket_mb")
command_line="$0 $*"
settings="$("$py" - "$variants" "$model_size" "$steps" "$warmup" "$nproc" "$batch" "$context" \
    "$bucket_mb" "$use_torch_profiler" "${nsys_reason:-enabled}" "${NNODES:-1}" <<'EOF'
import json, sys
keys = ["variants", "model_size", "steps", "warmup_steps", "nproc_per_node", "batch_size",
        "context_length", "bucket_mb", "torch_profiler", "nsys", "nnodes"]
values = dict(zip(keys, sys.argv[1:]))
values["variants"] = values["variants"].split(",")
for k in ("steps", "warmup_steps", "nproc_per_node", "batch_size", "context_length", "nnodes"):
    values[k] = int(values[k])
values["bucket_mb"] = float(values["bucket_mb"])
values["torch_profiler"] = values["torch_profiler"] == "1"
print(json.dumps(values))
EOF
)"
failed=()
manifest() {  # manifest STATUS
    local IFS=,
    (cd "$repo" && "$py" -m workloads.manifest "$out" --status "$1" --command "$command_line" \
        --settings "$settings" --failed "${failed[*]}") \
        || echo "run_profiles: could not write the manifest" >&2
}
interrupted() {
    echo "interrupted $(date -Is)" >> "$out/INCOMPLETE"
    manifest interrupted
    echo "run_profiles: interrupted; $out is incomplete" >&2
    exit 130
}
trap interrupted INT TERM
manifest running

run_variant() {  # run_variant VARIANT -> 0 when every requested profile of it succeeded
    local v="$1" dir="$out/$1" ok=0
    mkdir -p "$dir"
    if [[ "$use_torch_profiler" == 1 ]]; then
        (cd "$repo" && "${torchrun[@]}" "${train[@]}" --variant "$v" --profile torch \
            --out "$dir") > "$dir/train.log" 2>&1 || { echo "  log: $dir/train.log" >&2; ok=1; }
    fi
    if [[ -z "$nsys_reason" ]]; then
        # A separate run: nsys and torch.profiler would both claim CUPTI in one process.
        (cd "$repo" && nsys profile --trace=cuda,nvtx,osrt --capture-range=cudaProfilerApi \
            --capture-range-end=stop --output="$dir/profile" \
            "${torchrun[@]}" "${train[@]}" --variant "$v" --profile none \
            --cuda-profiler-range --out "$dir/nsys-run") > "$dir/nsys.log" 2>&1 \
            || { echo "  log: $dir/nsys.log" >&2; ok=1; }
    fi
    if [[ "$use_torch_profiler" != 1 && -n "$nsys_reason" ]]; then
        (cd "$repo" && "${torchrun[@]}" "${train[@]}" --variant "$v" --profile none \
            --out "$dir") > "$dir/train.log" 2>&1 || { echo "  log: $dir/train.log" >&2; ok=1; }
    fi
    return $ok
}

echo "run_profiles: $out ($nproc process(es), model $model_size, $steps steps, variants $variants)"
for v in "${variant_list[@]}"; do
    echo "run_profiles: $v ..."
    if run_variant "$v"; then
        echo "run_profiles: $v done"
    else
        failed+=("$v")
        echo "run_profiles: $v FAILED" >&2
    fi
    manifest running
done

status=complete
[[ ${#failed[@]} -gt 0 ]] && status=failed
rm -f "$out/INCOMPLETE"
manifest "$status"

report=""
if [[ "$use_torch_profiler" == 1 || -z "$nsys_reason" ]] && [[ ${#failed[@]} -lt ${#variant_list[@]} ]]; then
    # Exit 1 from these means "written, with caveats on stderr"; only a missing file fails.
    "$tk" summary "$out" --write "$out" -q
    [[ -f "$out/summary.json" ]] || status=failed
    "$tk" report "$out" -o "$out/report.html" -q
    if [[ -f "$out/report.html" ]]; then report="$out/report.html"; else status=failed; fi
    manifest "$status"
fi
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "run_profiles: failed variants: ${failed[*]} (logs in their directories)" >&2
fi
if [[ -n "$report" ]]; then
    echo "report: $report"
else
    echo "run_profiles: no report written; see $out" >&2
fi
[[ "$status" == complete ]]
