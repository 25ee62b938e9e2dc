# Sourced by the job scripts: the GPU environment that slurm/setup_env.sh built once. Jobs never
# install anything (compute nodes may have no internet, and concurrent jobs would race on one venv).
venv="${MEMFOREST_VENV:-$PWD/.venv-gpu}"
if [ ! -x "$venv/bin/memforest-bench" ]; then
  echo "no GPU environment at $venv: build it once, on a login node, with: bash slurm/setup_env.sh" >&2
  exit 2
fi
export TOKENIZERS_PARALLELISM=false
# Weights come from the hub cache under their hub ids: setup_env.sh downloaded every id the shipped
# configs and scripts name (python -m benchmarks.harness.hub_models). Set HF_HUB_OFFLINE=0 for others.
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
# Compile caches on the node's own disk, one set per job: array tasks starting together would otherwise
# JIT-compile into the same ~/.cache/vllm, Triton and Inductor caches on a shared filesystem.
job_tmp="${TMPDIR:-/tmp}/memforest-${SLURM_JOB_ID:-$$}"
export VLLM_CACHE_ROOT="${VLLM_CACHE_ROOT:-$job_tmp/vllm}"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$job_tmp/triton}"
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$job_tmp/inductor}"

# preflight OVERRIDES...: the GPU preflight (driver, GPU, free memory for the shares, caches) for the
# llm and embedder the overrides choose; the job stops with its one-line reasons when it fails. A sweep
# over several llm or embedder options is left to the harness, which checks each model before it builds it.
preflight() {
  local chosen=() a
  for a in "$@"; do
    case "$a" in
      llm=*,*|embedder=*,*) ;;
      llm=*|embedder=*|llm.*|embedder.*|+llm.*|+embedder.*|++llm.*|++embedder.*) chosen+=("$a");;
    esac
  done
  "$venv/bin/python" -m benchmarks.harness.preflight --config ${chosen[@]+"${chosen[@]}"} || exit 2
}
