"""The paper's serving setup as configurations: the FP8 backbone on a GPU of its own, its served twin, the
embedder on a second GPU, a two-GPU launcher; the KV cache vLLM allocated recorded in run.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import vllm_stub
from hydra import compose, initialize_config_dir

from benchmarks.harness import models, runner
from benchmarks.harness.app import CONFIG_DIR, compose_config
from benchmarks.harness.models import library_config
from benchmarks.harness.schema import bench_config
from memforest.config import LLMConfig
from memforest.llm.vllm_backend import VLLMChatModel

REPO = Path(__file__).resolve().parents[1]


def test_the_fp8_backbone_composes_as_the_paper_served_it() -> None:
    cfg = bench_config(compose_config(["llm=qwen3_30b_a3b_fp8", "embedder=qwen3_embedding_0p6b_cuda1"]))
    llm = library_config(LLMConfig, cfg.llm)
    assert llm.model == "Qwen/Qwen3-30B-A3B-Instruct-2507-FP8" and llm.backend == "vllm"
    assert llm.engine_args["max_num_seqs"] == 512 and llm.concurrency == 512
    assert cfg.embedder.backend == "sentence_transformers" and cfg.embedder.device == "cuda:1"
    assert cfg.embedder.model == "Qwen/Qwen3-Embedding-0.6B" and cfg.embedder.dim == 1024
    served = bench_config(compose_config(["llm=qwen3_30b_a3b_fp8_server"]))
    assert served.llm.backend == "openai" and served.llm.model == llm.model
    assert served.llm.name == cfg.llm.name


def test_the_command_line_prints_the_fp8_job() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.harness.app", "llm=qwen3_30b_a3b_fp8", "--cfg",
                           "job"], cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "Qwen/Qwen3-30B-A3B-Instruct-2507-FP8" in done.stdout and "max_num_seqs: 512" in done.stdout


def test_two_gpus_per_task_is_a_launcher_option() -> None:
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3", job_name="memforest-bench"):
        cfg = compose("config", overrides=["hydra/launcher=slurm_2gpu"], return_hydra_config=True)
    assert cfg.hydra.launcher.gpus_per_node == 2
    assert any("PYTORCH_NVML_BASED_CUDA_CHECK" in line for line in cfg.hydra.launcher.setup)


def test_the_kv_cache_vllm_allocated_is_recorded_in_run_json(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    stub = vllm_stub.install(monkeypatch, "0.33.0")
    monkeypatch.setattr(models, "_preflight", lambda llm, embedder: None)
    cfg = bench_config(compose_config(["llm=qwen3_30b_a3b_fp8", "embedder.backend=hash", "embedder.dim=64",
                                       "method=flat_sessions", "dataset.limit=1", "judge.enabled=false",
                                       "progress=false", f"output_root={tmp_path}"]))
    runner.run_benchmark(cfg)
    run = json.loads((Path(cfg.run_dir) / "run.json").read_text())
    kv = run["llm_kv_cache"]
    assert kv["block_size"] == vllm_stub.BLOCK_SIZE and kv["tokens"] == kv["gpu_blocks"] * kv["block_size"]
    stub.device.held.clear()
    bf16 = VLLMChatModel(library_config(LLMConfig, bench_config(compose_config(["llm=qwen3_30b_a3b"])).llm))
    assert bf16.kv_cache is not None and kv["tokens"] > 4 * bf16.kv_cache["tokens"]  # the shared-GPU setup
    bf16.close()
