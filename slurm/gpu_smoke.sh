#!/usr/bin/env bash
#SBATCH --job-name=memforest-gpu-smoke
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --mem=64G
#SBATCH --time=00:30:00
#SBATCH --output=slurm-%x-%j.out
# First contact with a GPU node. First the contract test of the vLLM stand-in against the installed
# vLLM, then the GPU preflight (driver, GPU, free memory, caches), then the shipped sample (six questions)
# through memforest_embed, memforest_planner and the Mem0 baseline, with the backbone and the embedder in
# process (vLLM) on one GPU, then the comparison table. Each run builds and releases both engines in the
# same process, so this also checks that the memory shares fit and that a closed engine gives its memory
# back. Sized to end within 10 minutes on one H100 with the weights already in the hub cache
# (slurm/setup_env.sh downloads every model the shipped configs name that its vLLM runs, these among
# them); it prints its wall time. The contract test knows vLLM 0.11 and 0.33, the two wheel sets.
#   sbatch slurm/gpu_smoke.sh              or, on an interactive GPU node:  bash slurm/gpu_smoke.sh
# Any argument is one more override, e.g. llm=qwen3_4b. Results: results/gpu_smoke/ (a second start
# only prints the table: remove that folder to run again).
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}"
source slurm/env.sh
"$venv/bin/python" -m pytest -q tests/test_vllm_contract.py
models=(llm=qwen3_30b_a3b embedder=qwen3_embedding_0p6b)
preflight "${models[@]}" "$@"
# Eager mode skips CUDA graph capture and compilation at each engine start: six starts in one script.
"$venv/bin/memforest-bench" -m method=memforest_embed,memforest_planner,mem0 dataset=sample \
    "${models[@]}" experiment_name=gpu_smoke "++llm.engine_args.enforce_eager=true" "$@"
echo "gpu smoke: ${SECONDS}s"
