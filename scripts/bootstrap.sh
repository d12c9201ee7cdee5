#!/usr/bin/env bash
# Create .venv in the repo root when it is missing and install tracekit into it, editable, with
# the extras the checkout needs: workloads (torch, nvtx: training), test, bench.
# Run by run_tests.sh and run_profiles.sh; safe to run again (it only reinstalls the project
# when pyproject.toml or the extras changed). The workloads themselves are not installed: they
# run from the checkout (python -m workloads.train, repository root as working directory).
#
# Environment (all optional):
#   TRACEKIT_VENV         where the virtual environment lives      (default: <repo>/.venv)
#   TRACEKIT_PYTHON       interpreter used to create it             (default: python3)
#   TRACEKIT_TORCH        pip requirement for torch                 (default: torch==2.13.0 without a GPU,
#                                                                    torch with one)
#   TRACEKIT_TORCH_INDEX  extra index for torch, e.g. https://download.pytorch.org/whl/cpu
#   TRACEKIT_SYSTEM_SITE  1: let the venv see system packages (a preinstalled CUDA torch)
#   TRACEKIT_EXTRAS       extras to install                         (default: workloads,test,bench;
#                                                                    without workloads, no torch)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${TRACEKIT_VENV:-$repo/.venv}"
python="${TRACEKIT_PYTHON:-python3}"
stamp="$venv/.tracekit-installed"
extras="${TRACEKIT_EXTRAS-workloads,test,bench}"

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

if [[ ! -x "$venv/bin/python" ]]; then
    echo "bootstrap: creating $venv" >&2
    site=()
    [[ "${TRACEKIT_SYSTEM_SITE:-0}" == 1 ]] && site=(--system-site-packages)
    "$python" -m venv "${site[@]}" "$venv"
fi

pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

# torch first, chosen for this machine (CPU build without a GPU), so the workloads extra's
# torch requirement is already met and pip never pulls the CUDA build onto a CPU machine.
if [[ ",$extras," == *",workloads,"* ]] && ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
    if has_gpu; then torch_req="${TRACEKIT_TORCH:-torch}"; else torch_req="${TRACEKIT_TORCH:-torch==2.13.0}"; fi
    index=()
    [[ -n "${TRACEKIT_TORCH_INDEX:-}" ]] && index=(--extra-index-url "$TRACEKIT_TORCH_INDEX")
    echo "bootstrap: installing $torch_req" >&2
    "${pip[@]}" install "${index[@]}" "$torch_req"
fi

want="$(sha256sum "$repo/pyproject.toml" | cut -d' ' -f1) [$extras]"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    echo "bootstrap: installing tracekit[$extras] and its dependencies into $venv" >&2
    "${pip[@]}" install -e "$repo${extras:+[$extras]}"
    echo "$want" > "$stamp"
fi
