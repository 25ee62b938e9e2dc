#!/usr/bin/env bash
# Builds the GPU environment once, on a login node with internet access; the jobs only use it.
#   bash slurm/setup_env.sh
# Makes $MEMFOREST_VENV (default .venv-gpu) with vLLM and the baselines, resolved together by
# $MEMFOREST_CONSTRAINTS (default slurm/constraints-gpu.txt: vLLM 0.33, torch 2.14 built for CUDA 13, for
# NVIDIA drivers of the 580 branch or later; slurm/constraints-gpu-cuda12.txt: vLLM 0.11, torch 2.8 built
# for CUDA 12.8, for drivers >= 525.60.13), and pytest for the vLLM contract test of slurm/gpu_smoke.sh;
# with MEMFOREST_WANDB=1 also the wandb extra (results mirrored to Weights & Biases).
# Then downloads into the hub cache ($HF_HOME: put it on a filesystem the compute nodes see) every model
# id the shipped configs and job scripts name that the wheel set's vLLM runs, listed by
# `python -m benchmarks.harness.hub_models --vllm VERSION` (Gemma 4 needs vLLM 0.33, so the CUDA 12 set
# leaves it out), so that jobs run with HF_HUB_OFFLINE=1. $MEMFOREST_MODELS (ids, space-separated)
# replaces that list. Gated models (google/gemma-*) need HF_TOKEN and the licence accepted on the hub: a
# gated model of the shipped list that cannot be downloaded is only named at the end (the setup succeeds;
# runs that use it fail), while any model of $MEMFOREST_MODELS, and any other failed download, fails the
# setup. Then fetches the datasets the jobs read into the same cache (under $HF_HOME):
# `python -m benchmarks.datasets.download $MEMFOREST_DATASETS` (default "longmemeval_s locomo"; set it
# empty to fetch none); a dataset that cannot be fetched fails the setup.
# vLLM needs Python 3.11 or later: set PYTHON to choose the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${MEMFOREST_VENV:-.venv-gpu}"
constraints="${MEMFOREST_CONSTRAINTS:-slurm/constraints-gpu.txt}"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  for candidate in python3.12 python3.13 python3.11 python3; do
    if command -v "$candidate" >/dev/null; then python="$candidate"; break; fi
  done
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "vLLM needs Python >= 3.11; found ${python:-none}: set PYTHON=/path/to/python3.12 (or module load python)" >&2
  exit 2
fi
extras="gpu,slurm,mem0,mempalace,zep,memoryos"
if [ "${MEMFOREST_WANDB:-0}" = 1 ]; then extras="$extras,wandb"; fi
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --upgrade "pip>=24"
"$venv/bin/python" -m pip install -c "$constraints" -e ".[$extras]" "pytest>=8"
"$venv/bin/python" -m pip install --no-deps "memoryos-pro==0.1.0"  # its own pins do not hold (baselines/README.md)

# The vLLM of this wheel set: its pin in the constraints file, else the one installed.
vllm_version="$(sed -n 's/^vllm==\([0-9][0-9a-z.+]*\).*/\1/p' "$constraints" | head -n 1)"
if [ -z "$vllm_version" ]; then
  vllm_version="$("$venv/bin/python" -c 'from importlib.metadata import version; print(version("vllm"))')"
fi
if [ -n "${MEMFOREST_MODELS:-}" ]; then
  models="$MEMFOREST_MODELS" asked=1
else
  models="$("$venv/bin/python" -m benchmarks.harness.hub_models --vllm "$vllm_version")" asked=0
fi
download='
import sys
from huggingface_hub import snapshot_download
from huggingface_hub.errors import GatedRepoError
try:
    print(snapshot_download(sys.argv[1]))
except GatedRepoError as exc:
    reason = " ".join(str(exc).split())
    print(f"{sys.argv[1]}: gated: {reason}", file=sys.stderr)
    sys.exit(3)'
failed=() gated=()
for model in $models; do
  status=0
  "$venv/bin/python" -c "$download" "$model" || status=$?
  case "$status" in
    0) ;;
    3) gated+=("$model");;
    *) failed+=("$model");;
  esac
done

datasets="${MEMFOREST_DATASETS-longmemeval_s locomo}"
datasets_ok=1
if [ -n "$datasets" ]; then
  "$venv/bin/python" -m benchmarks.datasets.download $datasets || datasets_ok=0  # one argument a name
fi

if [ "$asked" = 0 ]; then  # not asked for: a run that needs it says so
  for model in ${gated[@]+"${gated[@]}"}; do
    echo "warning: $model not downloaded: it is gated; to run it, accept its licence at" \
         "https://huggingface.co/$model, set HF_TOKEN, and run this again" >&2
  done
  gated=()
fi
if [ "${#gated[@]}" -gt 0 ]; then
  echo "not downloaded: ${gated[*]} (gated: set HF_TOKEN and accept the licence on the hub; then run this again)" >&2
fi
if [ "${#failed[@]}" -gt 0 ]; then
  echo "not downloaded: ${failed[*]} (see the errors above; then run this again)" >&2
fi
if [ "$datasets_ok" = 0 ]; then
  echo "datasets not downloaded (see above): run this again, or set MEMFOREST_DATASETS to the ones you need" >&2
fi
if [ "${#gated[@]}" -gt 0 ] || [ "${#failed[@]}" -gt 0 ] || [ "$datasets_ok" = 0 ]; then
  exit 1
fi
echo "GPU environment ready: $venv (vLLM $vllm_version; run jobs from this checkout; set MEMFOREST_VENV if you moved it)"
