# Sourced by the job scripts: the GPU environment that slurm/setup_env.sh built once. Jobs never
# install anything (compute nodes may have no internet, and concurrent jobs would race on one venv).
venv="${MEMFOREST_VENV:-$PWD/.venv-gpu}"
if [ ! -x "$venv/bin/memforest-bench" ]; then
  echo "no GPU environment at $venv: build it once, on a login node, with: bash slurm/setup_env.sh" >&2
  exit 2
fi
export TOKENIZERS_PARALLELISM=false
