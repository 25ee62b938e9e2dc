# Sourced by the job scripts: the GPU environment that slurm/setup_env.sh built once. Jobs never
# install anything (compute nodes may have no internet, and concurrent jobs would race on one venv).
venv="${MEMFOREST_VENV:-$PWD/.venv-gpu}"
if [ ! -x "$venv/bin/memforest-bench" ]; then
  echo "no GPU environment at $venv: build it once, on a login node, with: bash slurm/setup_env.sh" >&2
  exit 2
fi
export TOKENIZERS_PARALLELISM=false
# torch counts GPUs through NVML, leaving CUDA uninitialised: a process that counted them through CUDA
# could not fork a child that uses CUDA, and vLLM forks its engine core (the preflight asks torch in a
# child of its own either way).
export PYTORCH_NVML_BASED_CUDA_CHECK=1
# Behind a proxy, health checks of this node's servers and clients of servers on other nodes of the
# cluster must go around it: this node's names and, for a host name with a domain, that domain.
if [ -n "${http_proxy:-}${https_proxy:-}${HTTP_PROXY:-}${HTTPS_PROXY:-}" ]; then
  proxy_bypass="localhost,127.0.0.1,::1,$(hostname)"
  case "$(hostname)" in *.*) proxy_bypass="$proxy_bypass,.$(hostname | cut -d. -f2-)";; esac
  no_proxy="${no_proxy:-${NO_PROXY:-}}"
  NO_PROXY="${NO_PROXY:-$no_proxy}"
  export no_proxy="${no_proxy:+$no_proxy,}$proxy_bypass" NO_PROXY="${NO_PROXY:+$NO_PROXY,}$proxy_bypass"
fi
# Weights come from the hub cache under their hub ids: setup_env.sh downloaded every id the shipped
# configs and scripts name that the wheel set's vLLM runs (python -m benchmarks.harness.hub_models --vllm
# VERSION). Set HF_HUB_OFFLINE=0 for others.
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
