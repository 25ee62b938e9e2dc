"""The SLURM job scripts, run by bash outside SLURM with a stand-in GPU environment: `vllm serve` is a
small program answering /health (it records its arguments), `memforest-bench` prints what it was given,
and `vllm` is importable only as far as its engine arguments, which the argument builder reads."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import vllm_stub

from benchmarks.harness.app import compose_config
from benchmarks.harness.schema import bench_config
from benchmarks.harness.vllm_args import flags, serve_args

REPO = Path(__file__).resolve().parents[1]

FAKE_VLLM = '''
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[1:]
with open(sys.argv[0] + ".calls", "a") as calls:
    calls.write(json.dumps(args) + "\\n")
class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", int(args[args.index("--port") + 1])), Health).serve_forever()
'''
FAKE_BENCH = '''
import json, os, sys
print("BENCH " + json.dumps({"argv": sys.argv[1:], "llm": os.environ.get("MEMFOREST_LLM_BASE_URL"),
                             "embed": os.environ.get("MEMFOREST_EMBED_BASE_URL"),
                             "offline": os.environ.get("HF_HUB_OFFLINE")}))
'''


def test_vllm_serve_arguments_follow_the_in_process_configs(monkeypatch: pytest.MonkeyPatch) -> None:
    args = serve_args(["llm=qwen3_30b_a3b"])
    assert args[0] == "Qwen/Qwen3-30B-A3B-Instruct-2507"
    assert args[args.index("--max-model-len") + 1] == "32768"
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.85"
    assert "--enable-prefix-caching" in args and "--enable-prompt-tokens-details" in args
    gemma = serve_args(["llm=gemma4_12b"])
    assert json.loads(gemma[gemma.index("--limit-mm-per-prompt") + 1]) == {"image": 0, "audio": 0, "video": 0}
    assert (flags({"enforce_eager": False, "max_num_seqs": 64})
            == ["--no-enforce-eager", "--max-num-seqs", "64"])
    for generation, pooling in (("0.10.0", ["--task", "embed"]), ("0.33.0", ["--runner", "pooling"])):
        with monkeypatch.context() as patch:
            vllm_stub.install(patch, generation)
            embed = serve_args(["embedder=qwen3_embedding_0p6b"])
        assert embed[:3] == ["Qwen/Qwen3-Embedding-0.6B", *pooling]
        assert embed[embed.index("--gpu-memory-utilization") + 1] == "0.08"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fake_environment(root: Path) -> Path:
    """A venv-shaped folder: bin/python (this interpreter, this checkout and a `vllm` exposing only its
    engine arguments on the path), bin/vllm, bin/memforest-bench."""
    stub = root / "site" / "vllm"
    (stub / "engine").mkdir(parents=True)
    (stub / "__init__.py").write_text("")
    (stub / "engine" / "__init__.py").write_text("")
    (stub / "engine" / "arg_utils.py").write_text(
        "from dataclasses import dataclass\n\n@dataclass\nclass EngineArgs:\n    runner: str = 'auto'\n")
    bin_dir = root / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    path = os.pathsep.join([str(REPO), str(root / "site")])
    for name, body in (("python", None), ("vllm", FAKE_VLLM), ("memforest-bench", FAKE_BENCH)):
        exe = bin_dir / name
        if body is None:
            exe.write_text(f'#!/bin/sh\nPYTHONPATH="{path}" exec "{sys.executable}" "$@"\n')
        else:
            (bin_dir / f"{name}.py").write_text(body)
            exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{bin_dir / name}.py" "$@"\n')
        exe.chmod(0o755)
    return root / "venv"


def job(script: str, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(["bash", f"slurm/{script}", *args], cwd=REPO, env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


@pytest.mark.integration
def test_server_job_writes_addresses_once_healthy_and_the_sweep_job_uses_them(tmp_path: Path) -> None:
    venv = fake_environment(tmp_path)
    servers = tmp_path / "servers.env"
    llm_port, embed_port = free_port(), free_port()
    env = {"MEMFOREST_VENV": str(venv), "MEMFOREST_SERVERS": str(servers), "LLM_PORT": str(llm_port),
           "EMBED_PORT": str(embed_port), "MEMFOREST_SERVER_WAIT_S": "60"}
    server = job("vllm_server.sbatch", env)
    try:
        sweep = job("bench_sweep.sbatch", env, "method=flat_rag", "seed=0,1")
        out, _ = sweep.communicate(timeout=120)
        assert sweep.returncode == 0, out
        bench = json.loads(out.split("BENCH ", 1)[1])
        assert bench["argv"] == ["-m", "llm=qwen3_30b_a3b_server", "embedder=qwen3_embedding_0p6b_server",
                                 "method=flat_rag", "seed=0,1"]
        assert bench["llm"].endswith(f":{llm_port}/v1") and bench["embed"].endswith(f":{embed_port}/v1")
        calls = [json.loads(line) for line in (venv / "bin" / "vllm.py.calls").read_text().splitlines()]
        embed_call, llm_call = calls  # the embedder first: each server checks its share is free
        assert embed_call[:4] == ["serve", "Qwen/Qwen3-Embedding-0.6B", "--runner", "pooling"]
        assert (llm_call[1] == "Qwen/Qwen3-30B-A3B-Instruct-2507"
                and "--enable-prompt-tokens-details" in llm_call)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    deadline = time.monotonic() + 10
    while servers.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not servers.exists()  # no stale address for the next sweep


def test_a_job_without_the_built_environment_says_how_to_build_it(tmp_path: Path) -> None:
    run = job("memforest_bench.sbatch", {"MEMFOREST_VENV": str(tmp_path / "none")})
    out, _ = run.communicate(timeout=60)
    assert run.returncode == 2 and "slurm/setup_env.sh" in out


def test_the_gpu_smoke_sweep_composes_for_each_of_its_runs(tmp_path: Path) -> None:
    venv = fake_environment(tmp_path)
    smoke = job("gpu_smoke.sh", {"MEMFOREST_VENV": str(venv)}, "seed=3")
    out, _ = smoke.communicate(timeout=60)
    assert smoke.returncode == 0, out
    bench = json.loads(out.split("BENCH ", 1)[1].splitlines()[0])
    assert bench["offline"] == "1" and bench["argv"][0] == "-m"
    overrides = bench["argv"][1:]
    [methods] = [o for o in overrides if o.startswith("method=")]
    assert methods == "method=memforest_embed,memforest_planner,mem0"
    for method in methods.split("=")[1].split(","):
        cfg = bench_config(compose_config([f"method={method}" if o == methods else o for o in overrides]))
        assert (cfg.llm.backend, cfg.embedder.backend, cfg.seed) == ("vllm", "vllm", 3)
        assert cfg.llm.engine_args == {"enforce_eager": True} and cfg.dataset.name == "sample"
