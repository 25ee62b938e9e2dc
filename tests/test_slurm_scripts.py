"""The SLURM job scripts, run by bash outside SLURM with a stand-in GPU environment: `vllm serve` is a
small program answering /health (it records its arguments), `memforest-bench` prints what it was given,
and `vllm` is importable only as far as its engine arguments, which the argument builder reads; like
vLLM 0.11, it writes a log line to stdout as it is imported."""

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
from dataclasses import dataclass
from pathlib import Path

import pytest
import vllm_stub

from baselines.base import Endpoints, MemorySystem, SystemUnavailable
from benchmarks.harness.app import compose_config
from benchmarks.harness.hub_models import (
    hub_models,
    is_hub_id,
    min_vllm,
    option_model,
    runs_on,
    script_options,
    vllm_version,
)
from benchmarks.harness.schema import bench_config
from benchmarks.harness.systems import Models, served_system
from benchmarks.harness.vllm_args import flags, main, serve_args
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
# What vLLM 0.11 logs to stdout when it is imported
IMPORT_LOG = "INFO 01-01 00:00:00 [__init__.py:216] Automatically detected platform cuda."
# A GPU node as the preflight reads it: nvidia-smi's answer and torch's CUDA facts.
FAKE_SMI = "#!/bin/sh\nprintf '%s\\n' 'NVIDIA H100 80GB HBM3, {driver}, 81559, 81000'\n"
FAKE_TORCH = ("import types\nversion = types.SimpleNamespace(cuda='{cuda}')\n"
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


# At import, the stand-in `vllm` writes IMPORT_LOG to stdout: as vLLM's logger does (to sys.stdout as it
# is when vLLM loads), or straight to the stdout descriptor, past any redirection, as native code would.
LOG_THROUGH_SYS_STDOUT = f"print({IMPORT_LOG!r})\n"
LOG_TO_THE_DESCRIPTOR = f"import os\nos.write(1, {(IMPORT_LOG + chr(10)).encode()!r})\n"


def fake_vllm(site: Path, init: str) -> Path:
    """An importable `vllm` under `site` with only EngineArgs.runner (vLLM 0.11 on), running `init` as it
    is imported."""
    package = site / "vllm"
    (package / "engine").mkdir(parents=True)
    (package / "__init__.py").write_text(init)
    (package / "engine" / "__init__.py").write_text("")
    (package / "engine" / "arg_utils.py").write_text(
        "from dataclasses import dataclass\n\n@dataclass\nclass EngineArgs:\n    runner: str = 'auto'\n")
    return site


def fake_environment(root: Path, driver: str = "580.65.06",
                     cuda: str = "13.0") -> tuple[Path, dict[str, str]]:
    """A venv-shaped folder: bin/python (this interpreter, this checkout and `fake_vllm` writing its log
    line to the stdout descriptor on the path; `-m pytest` only records that it was asked;
    `-m benchmarks.harness.vllm_args --out FILE` writes $FAKE_SERVE_ARGS instead, when set), bin/vllm,
    bin/memforest-bench; and the job environment: a GPU node (nvidia-smi with `driver`, a torch built for
    `cuda`), TMPDIR and the hub cache under `root`."""
    fake_vllm(root / "site", LOG_TO_THE_DESCRIPTOR)
    (root / "gpu" / "torch").mkdir(parents=True)
    (root / "gpu" / "torch" / "__init__.py").write_text(FAKE_TORCH.format(cuda=cuda))
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
                           f'if [ "$1 $2 $3" = "-m benchmarks.harness.vllm_args --out" ] '
                           f'&& [ -n "$FAKE_SERVE_ARGS" ]; then\n'
                           f'  printf "%s\\n" "$FAKE_SERVE_ARGS" > "$4"; exit 0\nfi\n'
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
                 "SLURM_JOB_ID", "MEMFOREST_SERVER_JOB", "OPENAI_API_KEY", "FAKE_SERVE_ARGS"):
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
        # the model ids, though `vllm` logged to stdout while the embedder's arguments were read
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
    assert server.stdout is not None and IMPORT_LOG in server.stdout.read()


@pytest.mark.parametrize("first", [IMPORT_LOG, "--runner", ""])
def test_a_server_job_stops_unless_its_serve_arguments_start_with_a_model_id(tmp_path: Path,
                                                                              first: str) -> None:
    venv, env = fake_environment(tmp_path)
    server = job("vllm_server.sbatch", {**env, "SLURM_JOB_ID": "31", "FAKE_SERVE_ARGS": f"{first}\npooling"})
    out, _ = server.communicate(timeout=120)
    assert server.returncode == 2, out
    [line] = [line for line in out.splitlines() if "vllm_args gave no model id" in line]
    assert line.startswith("vllm_args gave no model id for llm=qwen3_30b_a3b as its first argument")
    assert not (venv / "bin" / "vllm.py.calls").exists()


def test_vllm_args_keeps_what_imports_print_out_of_the_arguments(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as patch:
        vllm_stub.install(patch, "0.11.0")
        expected = serve_args(["embedder=qwen3_embedding_0p6b"])
    for init, out in ((LOG_THROUGH_SYS_STDOUT, None), (LOG_TO_THE_DESCRIPTOR, tmp_path / "embedder.args")):
        site = fake_vllm(tmp_path / f"site-{out is None}", init)
        command = [sys.executable, "-m", "benchmarks.harness.vllm_args", "embedder=qwen3_embedding_0p6b"]
        done = subprocess.run([*command, *(["--out", str(out)] if out else [])], cwd=REPO, timeout=120,
                              capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(site)])})
        if out is None:  # vLLM's logger: sent to stderr while the arguments are built
            assert done.stdout.splitlines() == expected and IMPORT_LOG in done.stderr
        else:  # past Python's stdout: stays on stdout, while the file holds the arguments alone
            assert out.read_text().splitlines() == expected and done.stdout == IMPORT_LOG + "\n"
            assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".embedder.args")]
    assert main(["--out"]) == 2


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


@pytest.mark.parametrize(("driver", "cuda"), [("580.65.06", "13.0"), ("550.54.15", "12.8")])  # both sets
def test_the_gpu_smoke_sweep_checks_the_node_first_and_composes_for_each_of_its_runs(
        tmp_path: Path, driver: str, cuda: str) -> None:
    venv, env = fake_environment(tmp_path, driver, cuda)
    smoke = job("gpu_smoke.sh", {**env, "SLURM_JOB_ID": "99"}, "seed=3", "llm=qwen3_4b")
    out, _ = smoke.communicate(timeout=120)
    assert smoke.returncode == 0, out
    assert (venv / "bin" / "pytest.calls").read_text().split() == ["-m", "pytest", "-q",
                                                                   "tests/test_vllm_contract.py"]
    assert f"preflight: ok (NVIDIA H100 80GB HBM3, driver {driver}" in out
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


def test_a_wheel_sets_model_list_leaves_out_what_its_vllm_cannot_run() -> None:
    assert min_vllm("google/gemma-4-12B-it") == (0, 33) and min_vllm("Qwen/Qwen3-4B-Instruct-2507") is None
    assert not runs_on("google/gemma-4-12B-it", "0.11.0") and runs_on("google/gemma-4-12B-it", "0.33.2")
    assert vllm_version("0.11") == (0, 11) and vllm_version("0.33.0rc1") == (0, 33)
    with pytest.raises(ValueError, match="not a vLLM version"):
        vllm_version("latest")
    assert set(hub_models()) - set(hub_models(vllm="0.11")) == {"google/gemma-4-12B-it"}
    assert hub_models(vllm="0.33.0") == hub_models()
    done = subprocess.run([sys.executable, "-m", "benchmarks.harness.hub_models", "--vllm", "0.11"], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == hub_models(vllm="0.11")
    assert "left out google/gemma-4-12B-it: needs vLLM >= 0.33" in done.stderr


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
# Records each call. `-m venv DIR` makes DIR/bin/python a copy of this; pip does nothing; the dataset
# command records its arguments, failing when $FAKE_DATASETS_FAIL is set; the rest (version check, the
# model list, each download against FAKE_HUB) runs for real.
echo "$*" >> "{root}/calls.log"
case "$1 $2" in
  "-m venv") mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0;;
  "-m pip") exit 0;;
  "-m benchmarks.datasets.download")
    shift 2; echo "$*" >> "{root}/datasets.log"; [ -z "$FAKE_DATASETS_FAIL" ]; exit;;
esac
PYTHONPATH="{root}/hub:{repo}" exec "{python}" "$@"
"""
# huggingface_hub as setup_env.sh uses it: each download is recorded; a gated model raises GatedRepoError
# (for anyone without its licence), a model named in $FAKE_HUB_BROKEN another error.
FAKE_HUB = """import os
from pathlib import Path
from huggingface_hub.errors import GatedRepoError

def snapshot_download(repo_id):
    with open(Path(__file__).parents[2] / "downloads.log", "a") as log:
        log.write(repo_id + "\\n")
    if repo_id.startswith("google/gemma"):
        raise GatedRepoError("403 Client Error.\\nCannot access gated repo for url https://huggingface.co/...")
    if repo_id in os.environ.get("FAKE_HUB_BROKEN", "").split():
        raise OSError("Connection reset by peer")
    return "/hub/" + repo_id
"""
FAKE_HUB_ERRORS = ("class RepositoryNotFoundError(Exception): ...\n"
                   "class GatedRepoError(RepositoryNotFoundError): ...\n")


@dataclass
class Setup:
    returncode: int
    out: str
    calls: list[str]  # the interpreter's command lines
    downloads: list[str]  # the models asked of the hub, in order
    datasets: list[str] | None  # the dataset command's arguments; None: not run


def run_setup(root: Path, **env: str) -> Setup:
    """slurm/setup_env.sh with a stand-in interpreter and hub under `root`, and `env` (empty values too)."""
    (root / "hub" / "huggingface_hub").mkdir(parents=True)
    (root / "hub" / "huggingface_hub" / "__init__.py").write_text(FAKE_HUB)
    (root / "hub" / "huggingface_hub" / "errors.py").write_text(FAKE_HUB_ERRORS)
    python = root / "python3"
    python.write_text(FAKE_SETUP_PYTHON.format(root=root, repo=REPO, python=sys.executable))
    python.chmod(0o755)
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("MEMFOREST_", "FAKE_", "HF_")) and k != "PYTHON"}
    done = subprocess.run(["bash", "slurm/setup_env.sh"], cwd=REPO, capture_output=True, text=True,
                          timeout=120,
                          env={**base, "PYTHON": str(python), "MEMFOREST_VENV": str(root / "venv"), **env})
    datasets = root / "datasets.log"
    downloads = root / "downloads.log"
    return Setup(done.returncode, done.stdout + done.stderr, (root / "calls.log").read_text().splitlines(),
                 downloads.read_text().split() if downloads.exists() else [],
                 datasets.read_text().split() if datasets.exists() else None)


def test_setup_installs_the_chosen_wheel_set_and_downloads_the_one_model_list(tmp_path: Path) -> None:
    cu12 = run_setup(tmp_path / "cu12", MEMFOREST_CONSTRAINTS="slurm/constraints-gpu-cuda12.txt")
    assert cu12.returncode == 0, cu12.out
    install = "-m pip install -c slurm/constraints-gpu-cuda12.txt -e .[gpu,slurm,mem0,mempalace,zep,memoryos]"
    assert [c for c in cu12.calls if c.startswith("-m pip install -c")] == [install + " pytest>=8"]
    assert cu12.downloads == hub_models(vllm="0.11") and "google/gemma-4-12B-it" not in cu12.downloads
    assert cu12.datasets == ["longmemeval_s", "locomo"]
    assert "GPU environment ready" in cu12.out and "vLLM 0.11.0" in cu12.out
    # the default set: every listed model; Gemma 4 is gated, which only warns, as nobody asked for it
    cu13 = run_setup(tmp_path / "cu13", MEMFOREST_WANDB="1", MEMFOREST_DATASETS="")
    assert cu13.returncode == 0, cu13.out
    assert any(c.startswith("-m pip install -c slurm/constraints-gpu.txt -e .[gpu,slurm,mem0,mempalace,zep,"
                            "memoryos,wandb] ") for c in cu13.calls)
    assert cu13.downloads == hub_models() and "google/gemma-4-12B-it" in cu13.downloads
    [warning] = [line for line in cu13.out.splitlines() if line.startswith("warning:")]
    assert "google/gemma-4-12B-it not downloaded: it is gated" in warning
    assert "https://huggingface.co/google/gemma-4-12B-it" in warning and "HF_TOKEN" in warning
    assert cu13.datasets is None  # MEMFOREST_DATASETS empty: none fetched
    cu12_pins = (REPO / "slurm" / "constraints-gpu-cuda12.txt").read_text()
    assert "torch==2.8.0" in cu12_pins and "vllm==0.11.0" in cu12_pins  # torch 2.8.0's wheels: CUDA 12.8
    assert "torch==2.14.0" in (REPO / "slurm" / "constraints-gpu.txt").read_text()  # CUDA 13: driver 580


def test_setup_fails_for_a_model_asked_for_or_a_download_that_is_not_gated(tmp_path: Path) -> None:
    models = "Qwen/Qwen3-4B-Instruct-2507 google/gemma-4-12B-it"
    asked = run_setup(tmp_path / "asked", MEMFOREST_MODELS=models)
    assert asked.downloads == ["Qwen/Qwen3-4B-Instruct-2507", "google/gemma-4-12B-it"]
    assert asked.returncode == 1 and "not downloaded: google/gemma-4-12B-it (gated: set HF_TOKEN" in asked.out
    broken = run_setup(tmp_path / "broken", FAKE_HUB_BROKEN="Qwen/Qwen3-Embedding-0.6B")
    assert broken.returncode == 1 and "not downloaded: Qwen/Qwen3-Embedding-0.6B (" in broken.out
    assert "GPU environment ready" not in broken.out
    datasets = run_setup(tmp_path / "datasets", MEMFOREST_DATASETS="locomo", FAKE_DATASETS_FAIL="1")
    assert datasets.datasets == ["locomo"]
    assert datasets.returncode == 1 and "datasets not downloaded" in datasets.out
