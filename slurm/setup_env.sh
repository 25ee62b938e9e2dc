#!/usr/bin/env bash
# Builds the GPU environment once, on a login node with internet access; the jobs only use it.
#   bash slurm/setup_env.sh
# Makes $MEMFOREST_VENV (default .venv-gpu) with vLLM and the baselines, resolved together by
# slurm/constraints-gpu.txt, and downloads the weights of $MEMFOREST_MODELS into the hub cache
# ($HF_HOME: put it on a filesystem the compute nodes see), so that jobs run with HF_HUB_OFFLINE=1.
# vLLM needs Python 3.11 or later: set PYTHON to choose the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${MEMFOREST_VENV:-.venv-gpu}"
models="${MEMFOREST_MODELS:-Qwen/Qwen3-30B-A3B-Instruct-2507 Qwen/Qwen3-Embedding-0.6B}"
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
"$venv/bin/python" -m pip install -c slurm/constraints-gpu.txt -e ".[gpu,slurm,mem0,mempalace,zep,memoryos]"
"$venv/bin/python" -m pip install --no-deps "memoryos-pro==0.1.0"  # its own pins do not hold (baselines/README.md)
for model in $models; do
  "$venv/bin/python" -c 'import sys; from huggingface_hub import snapshot_download; print(snapshot_download(sys.argv[1]))' "$model"
done
echo "GPU environment ready: $venv (run jobs from this checkout; set MEMFOREST_VENV if you moved it)"
