#!/usr/bin/env bash
# Builds the GPU environment once, on a login node with internet access; the jobs only use it.
#   bash slurm/setup_env.sh
# Makes $MEMFOREST_VENV (default .venv-gpu) with vLLM and the baselines, resolved together by
# $MEMFOREST_CONSTRAINTS (default slurm/constraints-gpu.txt: vLLM 0.33, torch 2.14 built for CUDA 13, for
# NVIDIA drivers of the 580 branch or later; slurm/constraints-gpu-cuda12.txt: vLLM 0.11, torch 2.8 built
# for CUDA 12.8, for drivers >= 525.60.13), and pytest for the vLLM contract test of slurm/gpu_smoke.sh.
# Then downloads into the hub cache ($HF_HOME: put it on a filesystem the compute nodes see) every model
# id the shipped configs and job scripts name, listed by `python -m benchmarks.harness.hub_models`
# ($MEMFOREST_MODELS instead, if set), so that jobs run with HF_HUB_OFFLINE=1. Gated models
# (google/gemma-*) need HF_TOKEN and the licence accepted on the hub; a model that fails to download is
# named at the end.
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
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --upgrade "pip>=24"
"$venv/bin/python" -m pip install -c "$constraints" -e ".[gpu,slurm,mem0,mempalace,zep,memoryos]" \
    "pytest>=8"
"$venv/bin/python" -m pip install --no-deps "memoryos-pro==0.1.0"  # its own pins do not hold (baselines/README.md)
models="${MEMFOREST_MODELS:-$("$venv/bin/python" -m benchmarks.harness.hub_models)}"
failed=()
for model in $models; do
  "$venv/bin/python" -c 'import sys; from huggingface_hub import snapshot_download; print(snapshot_download(sys.argv[1]))' \
      "$model" || failed+=("$model")
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "not downloaded: ${failed[*]} (gated: set HF_TOKEN and accept the licence on the hub; then run this again)" >&2
  exit 1
fi
echo "GPU environment ready: $venv (run jobs from this checkout; set MEMFOREST_VENV if you moved it)"
