# The project's vocabulary: run, test, bench, fuzz, paper, lint.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Portable llama.cpp build: no -march=native, no multimodal helper.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF
export HF_HUB_OFFLINE = 1
export TRANSFORMERS_OFFLINE = 1
export TOKENIZERS_PARALLELISM = false
# CPU build of torch; a bare `torch` requirement would pull a multi-GB CUDA build.
TORCH_CPU ?= torch==2.13.0
# `make paper RESULTS=dir`: every paper table and figure from the results under dir, into $(PAPER_OUT)/.
RESULTS ?= results
PAPER_OUT ?= paper

.PHONY: run test bench fuzz paper paper-runs lint clean-venv gpu-check browser

$(VENV)/.installed-cpu: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade "pip>=24" >/dev/null
	$(PIP) install "$(TORCH_CPU)"
	$(PIP) install -c baselines/constraints.txt -e ".[cpu]"
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed-cpu
	$(PIP) install -c baselines/constraints.txt -e ".[cpu,dev,slurm,paper,mem0,mempalace,zep,memoryos]"
	$(PIP) install --no-deps "memoryos-pro==0.1.0"
	touch $@

# `make run`: the main job on the embedded CPU default, on the first instance of the shipped sample (a
# first result in about 3 minutes on 2 cores); `make run RUN_ARGS=` runs the whole sample (6 instances),
# and RUN_ARGS takes any overrides (`RUN_ARGS="dataset.limit=2 -v"`).
RUN_ARGS ?= dataset.limit=1
run: $(VENV)/.installed-cpu
	$(VENV)/bin/memforest-bench $(RUN_ARGS)

# The whole suite, spread over the machine's cores (pytest-xdist; TEST_WORKERS=0 runs it in one process).
TEST_WORKERS ?= auto
test: $(VENV)/.installed-dev browser
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=15

# Headless Chromium (Debian's package) for the test that renders `memforest-bench report`'s page; where
# it cannot be installed (no root, no apt-get) that test is skipped and says so.
browser:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] \
	  && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	     chromium fonts-dejavu-core >/dev/null; } \
	  || echo "make: no chromium here (apt-get install chromium): the report's browser test is skipped"

bench: $(VENV)/.installed-dev
	$(PY) -m benchmarks.micro

# The long fuzz profile (~10,500 generated cases over session files, command lines, config overrides,
# damaged stores, model faults and secrets); per-class counts printed and written to results/fuzz.json.
fuzz: $(VENV)/.installed-dev
	mkdir -p results
	MEMFOREST_FUZZ=long MEMFOREST_FUZZ_REPORT=results/fuzz.json $(PY) -m pytest -q tests/test_fuzz_classes.py

# The analysis needs only pandas and matplotlib (the `paper` extra), not the model stack.
$(VENV)/.installed-paper: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -e ".[paper]"
	touch $@

# Prints, for each artifact without runs, the command that would fill it (make paper-runs, or slurm/).
paper: $(VENV)/.installed-paper
	$(PY) -m analysis $(RESULTS) --out $(PAPER_OUT)

# Every paper experiment a CPU can honestly run, into $(RESULTS)/, resumable (benchmarks/paper_runs.py):
# the simulated write path on the sample and the generator-free recall sweeps on PAPER_DATA; then
# `make paper`. PAPER_RUNS_ARGS passes more, e.g. --limit 30 --chunk-limit 10 --locomo FILE.
PAPER_DATA ?= ../shared/data/longmemeval_s_slice.json.xz
PAPER_RUNS_ARGS ?=
paper-runs: $(VENV)/.installed-dev
	$(PY) -m benchmarks.paper_runs --results $(RESULTS) --data $(PAPER_DATA) $(PAPER_RUNS_ARGS)

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check memforest baselines benchmarks analysis tests
	$(VENV)/bin/mypy memforest baselines benchmarks analysis tests
	$(VENV)/bin/lint-imports

# The retrieval experiment with a sentence-transformers embedder on CUDA, no vLLM and no hub
# (slurm/gpu_check.sh): GPU_CHECK_DATA is any LongMemEval file, GPU_CHECK_ARGS e.g. --model DIR or
# --device cpu. Runs with this project's venv when it exists, else $(PYTHON) with the checkout on its path.
GPU_CHECK_DATA ?= ../shared/data/longmemeval_s_slice.json.xz
gpu-check:
	PYTHON=$(if $(wildcard $(PY)),$(PY),$(PYTHON)) bash slurm/gpu_check.sh $(GPU_CHECK_DATA) $(GPU_CHECK_ARGS)

clean-venv:
	rm -rf $(VENV)
