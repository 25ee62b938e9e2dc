"""The SLURM job scripts, run by bash outside SLURM with a stand-in GPU environment: `vllm serve` is a
small program answering /health (it records its arguments), `memforest-bench` prints what it was given,
and `vllm` is importable only as far as its engine arguments, which the argument builder reads."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import vllm_stub

from baselines.base import Endpoints, MemorySystem, SystemUnavailable
from benchmarks.harness.app import compose_config
from benchmarks.harness.hub_models import hub_models, is_hub_id, option_model, script_options
from benchmarks.harness.schema import bench_config
from benchmarks.harness.systems import Models, served_system
from benchmarks.harness.vllm_args import flags, serve_args
from memforest.llm.calllog import CallLog
from memforest.llm.testing import HashEmbedder

REPO = Path(__file__).resolve().parents[1]

FAKE_VLLM = '''
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[1:]
with open(sys.argv[0] + ".calls", "a") as calls:
    calls.write(json.dumps(args) + "\\n")
with open(sys.argv[0] + ".keys", "a") as keys:
    keys.write(os.environ.get("VLLM_API_KEY", "") + "\\n")
time.sleep(1)  # a server takes a while to start
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
names = ["MEMFOREST_LLM_BASE_URL", "MEMFOREST_EMBED_BASE_URL", "OPENAI_API_KEY", "HF_HUB_OFFLINE",
         "VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"]
print("BENCH " + json.dumps({"argv": sys.argv[1:], **{n: os.environ.get(n) for n in names}}))
'''
# A GPU node as the preflight reads it: nvidia-smi's answer and torch's CUDA facts.
FAKE_SMI = "#!/bin/sh\nprintf '%s\\n' 'NVIDIA H100 80GB HBM3, {driver}, 81559, 81000'\n"
FAKE_TORCH = ("import types\nversion = types.SimpleNamespace(cuda='13.0')\n"
              "cuda = types.SimpleNamespace(is_available=lambda: True)\n")


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


def fake_environment(root: Path, driver: str = "580.65.06") -> tuple[Path, dict[str, str]]:
    """A venv-shaped folder: bin/python (this interpreter, this checkout and a `vllm` exposing only its
    engine arguments on the path; `-m pytest` only records that it was asked), bin/vllm,
    bin/memforest-bench; and the job environment: a GPU node (nvidia-smi with `driver`, a CUDA 13 torch),
    TMPDIR and the hub cache under `root`."""
    stub = root / "site" / "vllm"
    (stub / "engine").mkdir(parents=True)
    (stub / "__init__.py").write_text("")
    (stub / "engine" / "__init__.py").write_text("")
    (stub / "engine" / "arg_utils.py").write_text(
        "from dataclasses import dataclass\n\n@dataclass\nclass EngineArgs:\n    runner: str = 'auto'\n")
    (root / "gpu" / "torch").mkdir(parents=True)
    (root / "gpu" / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (root / "gpu" / "nvidia-smi").write_text(FAKE_SMI.format(driver=driver))
    (root / "gpu" / "nvidia-smi").chmod(0o755)
    bin_dir = root / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    path = os.pathsep.join([str(REPO), str(root / "site"), str(root / "gpu")])
    for name, body in (("python", None), ("vllm", FAKE_VLLM), ("memforest-bench", FAKE_BENCH)):
        exe = bin_dir / name
        if body is None:
            exe.write_text(f'#!/bin/sh\nif [ "$1 $2" = "-m pytest" ]; then\n'
                           f'  echo "$*" >> "{bin_dir}/pytest.calls"; exit 0\nfi\n'
                           f'PYTHONPATH="{path}" exec "{sys.executable}" "$@"\n')
        else:
            (bin_dir / f"{name}.py").write_text(body)
            exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{bin_dir / name}.py" "$@"\n')
        exe.chmod(0o755)
    (root / "tmp").mkdir()
    (root / "hub").mkdir()  # filled by setup_env.sh; the jobs read it offline
    env = {"MEMFOREST_VENV": str(root / "venv"), "PATH": f"{root / 'gpu'}{os.pathsep}{os.environ['PATH']}",
           "TMPDIR": str(root / "tmp"), "HF_HOME": str(root / "hub"),
           "MEMFOREST_SERVERS_DIR": str(root / "servers")}
    for name in ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "HF_HUB_OFFLINE",
                 "SLURM_JOB_ID", "MEMFOREST_SERVER_JOB", "OPENAI_API_KEY"):
        env[name] = ""  # unset for the job: bash treats empty as unset in ${NAME:-default}
    return root / "venv", env


def job(script: str, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    full = {k: v for k, v in {**os.environ, **env}.items() if v != ""}
    return subprocess.Popen(["bash", f"slurm/{script}", *args], cwd=REPO, env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def wait_for(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


def read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    proc.wait(timeout=30)


@pytest.mark.integration
def test_a_server_job_writes_its_own_keyed_addresses_once_healthy_for_its_sweep(tmp_path: Path) -> None:
    venv, env = fake_environment(tmp_path)
    servers = tmp_path / "servers" / "4242.env"
    servers.parent.mkdir()
    servers.write_text("MEMFOREST_SERVER_JOB=4242\nMEMFOREST_LLM_BASE_URL=http://gone:1/v1\n")  # a requeue's
    server = job("vllm_server.sbatch", {**env, "SLURM_JOB_ID": "4242"})
    try:
        deadline = time.monotonic() + 30
        while servers.exists():  # removed before the servers start, not after
            assert time.monotonic() < deadline and "gone" in servers.read_text()
            time.sleep(0.02)
        sweep = job("bench_sweep.sbatch", {**env, "MEMFOREST_SERVER_JOB": "4242",
                                           "MEMFOREST_SERVER_WAIT_S": "120"}, "method=flat_rag", "seed=0,1")
        out, _ = sweep.communicate(timeout=180)
        assert sweep.returncode == 0, out
        bench = json.loads(out.split("BENCH ", 1)[1])
        assert bench["argv"] == ["-m", "llm=qwen3_30b_a3b_server", "embedder=qwen3_embedding_0p6b_server",
                                 "method=flat_rag", "seed=0,1"]
        addresses = read_env(servers)
        assert stat.S_IMODE(servers.stat().st_mode) == 0o600
        assert addresses["MEMFOREST_SERVER_JOB"] == "4242"
        assert addresses["MEMFOREST_SERVER_PID"] == str(server.pid)
        assert addresses["MEMFOREST_SERVER_HOST"] == socket.gethostname()
        calls = [json.loads(line) for line in (venv / "bin" / "vllm.py.calls").read_text().splitlines()]
        embed_call, llm_call = calls  # the embedder first: each server checks its share is free
        assert embed_call[:4] == ["serve", "Qwen/Qwen3-Embedding-0.6B", "--runner", "pooling"]
        assert (llm_call[1] == "Qwen/Qwen3-30B-A3B-Instruct-2507"
                and "--enable-prompt-tokens-details" in llm_call)
        ports = [call[call.index("--port") + 1] for call in (llm_call, embed_call)]
        assert len(set(ports)) == 2 and not set(ports) & {"8000", "8001"}  # found free, not fixed
        assert bench["MEMFOREST_LLM_BASE_URL"].endswith(f":{ports[0]}/v1")
        assert bench["MEMFOREST_EMBED_BASE_URL"].endswith(f":{ports[1]}/v1")
        keys = (venv / "bin" / "vllm.py.keys").read_text().split()
        assert keys == [bench["OPENAI_API_KEY"]] * 2 and len(bench["OPENAI_API_KEY"]) >= 32
        assert not any(bench["OPENAI_API_KEY"] in arg for call in calls for arg in call)  # not in `ps`
        assert addresses["OPENAI_API_KEY"] == bench["OPENAI_API_KEY"]
        served = bench_config(compose_config(bench["argv"][1:3]))  # the clients read the key from there
        assert served.llm.api_key_env == served.embedder.api_key_env == "OPENAI_API_KEY"
    finally:
        stop(server)
    assert not servers.exists()  # no stale address for the next sweep


@pytest.mark.integration
def test_a_killed_server_leaves_nothing_a_later_sweep_takes_for_live(tmp_path: Path) -> None:
    _, env = fake_environment(tmp_path)
    servers = tmp_path / "servers" / "77.env"
    server = job("vllm_server.sbatch", {**env, "SLURM_JOB_ID": "77"})
    try:
        wait_for(servers)
    finally:
        stop(server, signal.SIGKILL)  # no trap runs: the file stays behind
    assert servers.exists()
    sweep = job("bench_sweep.sbatch", {**env, "MEMFOREST_SERVER_JOB": "77", "MEMFOREST_SERVER_WAIT_S": "60"})
    out, _ = sweep.communicate(timeout=60)
    assert sweep.returncode == 2 and "server job 77 has ended" in out and "BENCH" not in out
    # the same file as if written on another host: its pid cannot be checked, /health decides
    text = servers.read_text().replace(f"MEMFOREST_SERVER_HOST={socket.gethostname()}",
                                       "MEMFOREST_SERVER_HOST=elsewhere")
    servers.write_text(text)
    sweep = job("bench_sweep.sbatch", {**env, "MEMFOREST_SERVER_JOB": "77", "MEMFOREST_SERVER_WAIT_S": "3"})
    out, _ = sweep.communicate(timeout=120)
    assert sweep.returncode == 2 and "does not answer" in out and "BENCH" not in out


def test_a_sweep_names_its_server_job_and_a_server_start_has_a_deadline(tmp_path: Path) -> None:
    _, env = fake_environment(tmp_path)
    sweep = job("bench_sweep.sbatch", env)
    out, _ = sweep.communicate(timeout=60)
    assert sweep.returncode == 2 and "MEMFOREST_SERVER_JOB" in out
    stuck = tmp_path / "stuck.py"  # a server that never answers
    stuck.write_text("import time\ntime.sleep(600)\n")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "slurm/wait_health.py", "--deadline-s", "1", "--every-s", "0.2",
                           "http://127.0.0.1:9/health"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "within 1s" in done.stderr and time.monotonic() - started < 30
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    done = subprocess.run([sys.executable, "slurm/wait_health.py", "--deadline-s", "60",
                           "--pid", str(gone.pid), "http://127.0.0.1:9/health"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "exited" in done.stderr


def test_a_job_without_the_built_environment_says_how_to_build_it(tmp_path: Path) -> None:
    run = job("memforest_bench.sbatch", {"MEMFOREST_VENV": str(tmp_path / "none")})
    out, _ = run.communicate(timeout=60)
    assert run.returncode == 2 and "slurm/setup_env.sh" in out


def test_the_gpu_smoke_sweep_checks_the_node_first_and_composes_for_each_of_its_runs(tmp_path: Path) -> None:
    venv, env = fake_environment(tmp_path)
    smoke = job("gpu_smoke.sh", {**env, "SLURM_JOB_ID": "99"}, "seed=3", "llm=qwen3_4b")
    out, _ = smoke.communicate(timeout=120)
    assert smoke.returncode == 0, out
    assert (venv / "bin" / "pytest.calls").read_text().split() == ["-m", "pytest", "-q",
                                                                   "tests/test_vllm_contract.py"]
    assert "preflight: ok (NVIDIA H100 80GB HBM3, driver 580.65.06" in out
    bench = json.loads(out.split("BENCH ", 1)[1].splitlines()[0])
    assert bench["HF_HUB_OFFLINE"] == "1" and bench["argv"][0] == "-m"
    job_tmp = tmp_path / "tmp" / "memforest-99"  # node-local compile caches, one set per job
    assert (bench["VLLM_CACHE_ROOT"], bench["TRITON_CACHE_DIR"], bench["TORCHINDUCTOR_CACHE_DIR"]) == (
        str(job_tmp / "vllm"), str(job_tmp / "triton"), str(job_tmp / "inductor"))
    overrides = bench["argv"][1:]
    [methods] = [o for o in overrides if o.startswith("method=")]
    assert methods == "method=memforest_embed,memforest_planner,mem0"
    for method in methods.split("=")[1].split(","):
        cfg = bench_config(compose_config([f"method={method}" if o == methods else o for o in overrides]))
        assert (cfg.llm.backend, cfg.embedder.backend, cfg.seed) == ("vllm", "vllm", 3)
        assert cfg.llm.engine_args == {"enforce_eager": True} and cfg.dataset.name == "sample"
        assert cfg.llm.model == "Qwen/Qwen3-4B-Instruct-2507"  # the suggested override is downloaded
    assert "Qwen/Qwen3-4B-Instruct-2507" in hub_models()


def test_a_node_whose_driver_is_too_old_stops_before_any_model_starts(tmp_path: Path) -> None:
    venv, env = fake_environment(tmp_path, driver="570.86.15")
    for script in ("gpu_smoke.sh", "vllm_server.sbatch"):
        run = job(script, {**env, "SLURM_JOB_ID": "5"})
        out, _ = run.communicate(timeout=120)
        assert run.returncode == 2 and "BENCH" not in out, out
        [line] = [line for line in out.splitlines() if line.startswith("preflight: ")]
        assert "driver 570.86.15 is too old for torch built with CUDA 13.0 (needs >= 580)" in line
    assert not (venv / "bin" / "vllm.py.calls").exists()
    cpu = job("memforest_bench.sbatch", env, "method=flat_rag", "llm=smollm2_cpu")  # nothing on the GPU
    out, _ = cpu.communicate(timeout=120)
    assert cpu.returncode == 0 and "nothing to check" in out and "BENCH" in out
    sweep = job("memforest_bench.sbatch", env, "-m", "llm=qwen3_4b,gemma4_12b")  # left to the harness
    out, _ = sweep.communicate(timeout=120)
    assert sweep.returncode == 0 and "BENCH" in out, out


HUB_ID = re.compile(r"^\s*model:\s*['\"]?([A-Za-z0-9][\w.-]*/[\w.-]+)['\"]?\s*(#.*)?$", re.M)


def test_one_list_names_every_hub_model_of_the_configs_and_scripts_and_setup_downloads_it() -> None:
    listed = set(hub_models())
    in_configs = {m for p in (REPO / "configs").rglob("*.yaml") for m in HUB_ID.findall(p.read_text())}
    assert {m for m, _ in in_configs} <= listed and listed
    named = script_options()
    assert {"llm/qwen3_30b_a3b", "llm/qwen3_4b", "embedder/qwen3_embedding_0p6b"} <= set(named)
    for option in named:
        group, name = option.split("/")
        model = option_model(group, name)
        assert model in listed or not is_hub_id(model), option
    done = subprocess.run([sys.executable, "-m", "benchmarks.harness.hub_models"], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == sorted(listed)
    setup = (REPO / "slurm" / "setup_env.sh").read_text()
    assert "-m benchmarks.harness.hub_models" in setup and "snapshot_download" in setup
    assert "Qwen/" not in setup  # no second list


def test_library_baselines_send_the_servers_key_through_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    served = ["method=mem0", "llm=qwen3_4b_server", "embedder=qwen3_embedding_0p6b_server"]
    cfg = bench_config(compose_config(served))
    seen: list[Endpoints] = []

    def factory(endpoints: Endpoints, name: str) -> MemorySystem:
        seen.append(endpoints)
        raise SystemUnavailable("enough")

    for key, sent in (("k" * 43, "k" * 43), (None, "local")):
        if key is None:
            monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        else:
            monkeypatch.setenv("OPENAI_API_KEY", key)  # what the sweep reads from the address file
        with pytest.raises(SystemUnavailable):
            served_system(cfg.method, cfg.method.serving, cfg.llm, cfg.embedder,  # type: ignore[arg-type]
                          Models(HashEmbedder(8), None, CallLog(None)), factory)  # type: ignore[arg-type]
        assert seen[-1].api_key == sent and seen[-1].json_schema  # a vLLM server takes json_schema


FAKE_SETUP_PYTHON = """#!/bin/sh
# Records each call. `-m venv DIR` makes DIR/bin/python a copy of this; pip does nothing; a download
# prints a path, except for a gated model; the rest (version check, the model list) runs for real.
echo "$*" >> "{log}"
case "$1 $2" in
  "-m venv") mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0;;
  "-m pip") exit 0;;
esac
case "$2" in
  *snapshot_download*) [ "$3" = "google/gemma-4-12B-it" ] && exit 1; echo "/hub/$3"; exit 0;;
esac
PYTHONPATH="{repo}" exec "{python}" "$@"
"""


def test_setup_installs_the_chosen_wheel_set_and_downloads_the_one_model_list(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    python = tmp_path / "python3"
    python.write_text(FAKE_SETUP_PYTHON.format(log=log, repo=REPO, python=sys.executable))
    python.chmod(0o755)
    env = {"PYTHON": str(python), "MEMFOREST_VENV": str(tmp_path / "venv"), "MEMFOREST_MODELS": "",
           "MEMFOREST_CONSTRAINTS": "slurm/constraints-gpu-cuda12.txt"}
    setup = job("setup_env.sh", env)
    out, _ = setup.communicate(timeout=120)
    calls = log.read_text().splitlines()
    install = "-m pip install -c slurm/constraints-gpu-cuda12.txt -e .[gpu,slurm,"
    assert any(c.startswith(install) for c in calls)
    downloads = [c.rsplit(" ", 1)[1] for c in calls if "snapshot_download" in c]
    assert downloads == hub_models()  # every listed model, one command
    assert setup.returncode == 1 and "not downloaded: google/gemma-4-12B-it (gated: set HF_TOKEN" in out
    cu12 = (REPO / "slurm" / "constraints-gpu-cuda12.txt").read_text()
    assert "torch==2.8.0" in cu12 and "vllm==0.11.0" in cu12  # torch 2.8.0's wheels: CUDA 12.8
    assert "torch==2.14.0" in (REPO / "slurm" / "constraints-gpu.txt").read_text()  # CUDA 13: driver 580
