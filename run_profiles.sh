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
# Every setting is checked before anything starts (exit 2, one line): numbers, switches,
# variants (each known and named once), the model size, a batch that splits over the
# processes, and --nproc against the GPUs torch sees and the CPU cores (at most 4 per core).
# Ctrl-C (SIGINT) or SIGTERM (kill, timeout, a scheduler) stops the running variant at once,
# records the run as interrupted, and exits 130 or 143.
#
# Layout: DIR/manifest.json, DIR/<variant>/{rank-<r>.trace.json.gz, timing.json, train.log,
# profile.nsys-rep, nsys.log}, DIR/summary.{json,csv}, DIR/report.html. DIR/INCOMPLETE exists
# while the run is going and stays if it is interrupted.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
command_line="$0"  # as typed, each argument quoted for the shell where it needs it
for arg in "$@"; do
    if [[ "$arg" =~ ^[A-Za-z0-9_./,:=@%+-]+$ ]]; then command_line+=" $arg"
    else command_line+=" $(printf '%q' "$arg")"; fi
done

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "run_profiles: error: $*" >&2; exit 2; }

out="${TRACEKIT_OUT:-}"
variants="${TRACEKIT_VARIANTS:-}"
model_size="${TRACEKIT_MODEL_SIZE:-}"
steps="${TRACEKIT_STEPS:-}"
nproc="${TRACEKIT_NPROC:-}"
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

# Names shared with the analysis (tracekit/contract.py; standard library only, so the system
# Python reads them before .venv exists): the run directory's file names.
system_py="${TRACEKIT_PYTHON:-python3}"
contract="$(cd "$repo" && "$system_py" -m tracekit.contract)" \
    || die "could not read tracekit/contract.py with $system_py"
eval "$contract"

settings_args=(--variants "$variants" --model-size "$model_size" --steps "$steps"
    --warmup-steps "${TRACEKIT_WARMUP_STEPS:-}" --nproc "$nproc"
    --batch-size "${TRACEKIT_BATCH_SIZE:-}" --context-length "${TRACEKIT_CONTEXT_LENGTH:-}"
    --bucket-mb "${TRACEKIT_BUCKET_MB:-}" --nsys "$use_nsys" --torch-profiler "$use_torch_profiler"
    --nnodes "${NNODES:-}" --node-rank "${NODE_RANK:-}" --master-port "${MASTER_PORT:-}")
# Cheap checks first, so a typo costs no install.
(cd "$repo" && "$system_py" -m workloads.run_settings --syntax-only "${settings_args[@]}") || exit 2
if [[ -n "$out" ]]; then
    [[ "$out" == /* ]] || out="$PWD/$out"
    [[ -e "$out" ]] && die "$out already exists; choose a new --out (runs are never overwritten)"
fi

"$repo/scripts/bootstrap.sh" || die "could not set up $repo/.venv"
cd "$repo" || die "cannot enter $repo"
py="$repo/.venv/bin/python"
tk="$repo/.venv/bin/tracekit"

# Every other check (model size, batch over the processes, --nproc against GPUs and cores),
# then the settings with this machine's defaults: variants, model_size, steps, warmup, nproc,
# batch, context, bucket_mb, use_torch_profiler, nsys_reason, nnodes, node_rank, settings.
resolved="$("$py" -m workloads.run_settings "${settings_args[@]}")" || exit 2
eval "$resolved"
IFS=, read -r -a variant_list <<< "$variants"

if [[ -z "$out" ]]; then
    out="$repo/runs/$(date +%Y%m%d-%H%M%S)"
    while [[ -e "$out" ]]; do out="$out-$RANDOM"; done
fi
mkdir -p "$out" || die "cannot create $out"
out="$(cd "$out" && pwd)"

failed=()
child=""  # process group of the command running now (see run_child)
manifest() {  # manifest STATUS
    local IFS=,
    "$py" -m workloads.manifest "$out" --status "$1" --command "$command_line" \
        --settings "$settings" --failed "${failed[*]}" \
        || echo "run_profiles: could not write the manifest" >&2
}
stop_child() {  # SIGTERM to the running command's process group; SIGKILL after 20 s
    # torchrun starts its workers in sessions of their own and, on SIGTERM, stops them before
    # it exits (they stop at once: nothing in them handles SIGTERM); so give it time to.
    [[ -n "$child" ]] || return 0
    kill -TERM -- "-$child" 2>/dev/null
    local i
    for ((i = 0; i < 200; i++)); do
        kill -0 -- "-$child" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL -- "-$child" 2>/dev/null
    wait "$child" 2>/dev/null
    child=""
}
interrupted() {  # interrupted SIGNAL STATUS
    trap '' INT TERM
    stop_child
    echo "interrupted by SIG$1 $(date -Is)" >> "$out/$incomplete"
    manifest interrupted
    echo "run_profiles: interrupted (SIG$1); $out is incomplete" >&2
    exit "$2"
}
run_child() {  # run_child LOG COMMAND...: COMMAND in its own process group, output to LOG
    # Its own group, so a signal to this script stops the whole of it (torchrun, its workers,
    # nsys) at once; bash runs traps while it waits in `wait`, not while a foreground command
    # runs, so the command is started in the background and waited for.
    local log="$1"
    shift
    setsid "$@" > "$log" 2>&1 < /dev/null &
    child=$!
    wait "$child"
    local status=$?
    child=""
    return $status
}

echo "started $(date -Is)" > "$out/$incomplete"
trap 'interrupted INT 130' INT
trap 'interrupted TERM 143' TERM
manifest running

master_port="${MASTER_PORT:-$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
torchrun=("$repo/.venv/bin/torchrun" --nnodes "$nnodes" --node-rank "$node_rank"
          --nproc-per-node "$nproc" --master-addr "${MASTER_ADDR:-127.0.0.1}"
          --master-port "$master_port")
train=(-m workloads.train --model-size "$model_size" --steps "$steps" --warmup-steps "$warmup"
       --batch-size "$batch" --context-length "$context" --bucket-mb "$bucket_mb")
[[ -n "$nsys_reason" ]] && echo "run_profiles: skipping Nsight Systems: $nsys_reason" >&2

run_variant() {  # run_variant VARIANT -> 0 when every requested profile of it succeeded
    local v="$1" dir="$out/$1" ok=0
    mkdir -p "$dir"
    if [[ "$use_torch_profiler" == 1 ]]; then
        run_child "$dir/$train_log" "${torchrun[@]}" "${train[@]}" --variant "$v" \
            --profile torch --out "$dir" || { echo "  log: $dir/$train_log" >&2; ok=1; }
    fi
    if [[ -z "$nsys_reason" ]]; then
        # A separate run: nsys and torch.profiler would both claim CUPTI in one process.
        run_child "$dir/$nsys_log" nsys profile --trace=cuda,nvtx,osrt \
            --capture-range=cudaProfilerApi --capture-range-end=stop \
            --output="$dir/$nsys_stem" "${torchrun[@]}" "${train[@]}" --variant "$v" \
            --profile none --cuda-profiler-range --out "$dir/$nsys_run_dir" \
            || { echo "  log: $dir/$nsys_log" >&2; ok=1; }
    fi
    if [[ "$use_torch_profiler" != 1 && -n "$nsys_reason" ]]; then
        run_child "$dir/$train_log" "${torchrun[@]}" "${train[@]}" --variant "$v" \
            --profile none --out "$dir" || { echo "  log: $dir/$train_log" >&2; ok=1; }
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
rm -f "$out/$incomplete"
manifest "$status"

report=""
if [[ "$use_torch_profiler" == 1 || -z "$nsys_reason" ]] && [[ ${#failed[@]} -lt ${#variant_list[@]} ]]; then
    # Exit 1 from these means "written, with caveats on stderr"; only a missing file fails.
    "$tk" summary "$out" --write "$out" -q
    [[ -f "$out/$summary_json" ]] || status=failed
    "$tk" report "$out" -o "$out/$report_html" -q
    if [[ -f "$out/$report_html" ]]; then report="$out/$report_html"; else status=failed; fi
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
