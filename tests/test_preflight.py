"""The GPU preflight on fake nodes: nvidia-smi output, torch's CUDA facts, the compiler and the proxy
settings made up, no GPU needed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness import gpu_node, models
from benchmarks.harness.gpu_demand import Demand, GpuUse, demand
from benchmarks.harness.gpu_node import Node, Toolchain, TorchFacts, problems, warnings
from benchmarks.harness.nvidia_smi import Gpu, parse_nvidia_smi, visible_gpus
from memforest.config import EmbedderConfig, LLMConfig
from memforest.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
H100 = "NVIDIA H100 80GB HBM3, 570.86.15, 81559, 81000\n"
# nvidia-smi --query-gpu=index,uuid,...: GPU 0 is taken by someone else, GPU 1 is free
NODE = ("0, GPU-aaaa1111-0000, NVIDIA H100 80GB HBM3, 580.65.06, 81559, 1000\n"
        "1, GPU-bbbb2222-0000, NVIDIA H100 80GB HBM3, 580.65.06, 81559, 81000\n")
CUDA13 = TorchFacts(True, "13.0", True)


def node(tmp_path: Path, smi: str | None = H100, torch: TorchFacts = CUDA13) -> Node:
    env = {name: str(tmp_path / name.lower()) for name in gpu_node.CACHES}
    return Node(None if smi is None else parse_nvidia_smi(smi), torch, env)


def with_driver(driver: str, free_mib: int = 81000) -> str:
    return f"NVIDIA H100 80GB HBM3, {driver}, 81559, {free_mib}\n"


def test_nvidia_smi_lines_are_read_and_a_strange_line_is_refused() -> None:
    assert parse_nvidia_smi(H100 + "\n") == [Gpu("NVIDIA H100 80GB HBM3", "570.86.15", 81559, 81000)]
    assert parse_nvidia_smi(NODE) == [
        Gpu("NVIDIA H100 80GB HBM3", "580.65.06", 81559, 1000, 0, "GPU-aaaa1111-0000"),
        Gpu("NVIDIA H100 80GB HBM3", "580.65.06", 81559, 81000, 1, "GPU-bbbb2222-0000")]
    with pytest.raises(ValueError, match="unexpected nvidia-smi line"):
        parse_nvidia_smi("No devices were found, really\n")


def test_what_nvidia_smi_cannot_fill_is_unknown_and_skips_its_check(tmp_path: Path) -> None:
    mig = "0, GPU-cccc, NVIDIA A100-SXM4-80GB, [N/A], [N/A], [Not Supported]\n"
    [gpu] = parse_nvidia_smi(mig)
    assert (gpu.driver, gpu.total_mib, gpu.free_mib) == (None, None, None)
    fake = node(tmp_path, mig)
    assert problems(fake, [0.9]) == []  # neither the driver nor the memory is checked
    [note] = warnings(fake)
    assert note.startswith("GPU 0 (NVIDIA A100-SXM4-80GB): nvidia-smi does not report its memory")
    assert parse_nvidia_smi("GRID A100-4C, N/A, 4096, N/A\n")[0].free_mib is None


@pytest.mark.parametrize(("cuda", "driver", "needs"), [
    ("13.0", "570.86.15", "580"), ("13.0", "575.57.08", "580"), ("12.8", "520.61.05", "525.60.13"),
    ("12.1", "470.256.02", "525.60.13"), ("11.8", "450.51.06", "450.80.2")])
def test_a_driver_older_than_torchs_cuda_needs_is_one_line_that_says_what_to_do(
    tmp_path: Path, cuda: str, driver: str, needs: str,
) -> None:
    [line] = problems(node(tmp_path, with_driver(driver), TorchFacts(True, cuda, False)), [0.5])
    assert f"driver {driver}" in line and f"CUDA {cuda}" in line and f">= {needs}" in line
    assert "newer driver" in line and "\n" not in line


@pytest.mark.parametrize(("cuda", "driver"), [("13.0", "580.65.06"), ("13.1", "590.44.01"),
                                              ("12.8", "570.86.15"), ("12.4", "525.60.13")])
def test_a_recent_enough_driver_passes(tmp_path: Path, cuda: str, driver: str) -> None:
    assert problems(node(tmp_path, with_driver(driver), TorchFacts(True, cuda, True)), [0.85, 0.08]) == []


def test_free_memory_must_hold_every_share_and_each_engine_process_overhead(tmp_path: Path) -> None:
    shares = [0.85, 0.08]  # 75,850 MiB of 81,559, plus 2 x 0.7 GiB = 77,284 MiB
    assert problems(node(tmp_path, with_driver("580.65.06", 77300)), shares) == []
    [line] = problems(node(tmp_path, with_driver("580.65.06", 77200)), shares)
    assert "75.4 GiB free" in line and "0.85+0.08" in line and "2 engine" in line
    assert "gpu_memory_utilization" in line
    # a sentence-transformers embedder on CUDA: no share, one process
    assert problems(node(tmp_path, with_driver("580.65.06", 600)), [], 1)
    assert problems(node(tmp_path, with_driver("580.65.06", 800)), [], 1) == []


def test_no_gpu_a_cpu_torch_and_no_torch_are_each_named(tmp_path: Path) -> None:
    [line] = problems(node(tmp_path, ""), [0.5])
    assert "sees no GPU" in line and "--gres=gpu" in line
    [line] = problems(node(tmp_path, None, TorchFacts(True, "13.0", False)), [0.5])
    assert "torch sees no GPU" in line
    [line] = problems(node(tmp_path, torch=TorchFacts(True, None, False)), [0.5])
    assert "CPU build" in line and "setup_env.sh" in line
    [line] = problems(node(tmp_path, torch=TorchFacts(False, None, False)), [0.5])
    assert "torch is not installed" in line
    # nvidia-smi absent but torch sees a GPU: the driver goes unchecked, nothing fails
    assert problems(node(tmp_path, None, CUDA13), [0.5]) == []


def test_a_cache_that_cannot_be_written_names_its_variable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    fake = node(tmp_path, with_driver("580.65.06"))
    fake.env = {**fake.env, "TRITON_CACHE_DIR": str(blocker / "triton")}
    [line] = problems(fake, [0.5])
    assert line.startswith("cache TRITON_CACHE_DIR at ") and "$TMPDIR" in line
    assert (tmp_path / "vllm_cache_root").is_dir()  # the others were created and written


def test_an_offline_job_only_reads_the_hub_cache(tmp_path: Path) -> None:
    """HF_HUB_OFFLINE: the hub cache must be there (it holds the weights) but need not be writable."""
    fake = node(tmp_path, with_driver("580.65.06"))
    shared = tmp_path / "shared-hub"
    shared.mkdir()
    fake.env = {**fake.env, "HF_HOME": str(shared), "HF_HUB_OFFLINE": "1"}
    assert problems(fake, [0.5]) == []
    assert list(shared.iterdir()) == []  # nothing written to a shared cache
    fake.env = {**fake.env, "HF_HOME": str(tmp_path / "missing")}
    [line] = problems(fake, [0.5])
    assert line.startswith("cache HF_HOME at ") and "HF_HUB_OFFLINE" in line
    assert not (tmp_path / "missing").exists()


def test_a_job_whose_models_come_from_directories_needs_no_hub_cache(tmp_path: Path) -> None:
    home = tmp_path / "home"  # a fresh HOME: no ~/.cache/huggingface
    home.mkdir()
    env = {"HOME": str(home), "HF_HUB_OFFLINE": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    fake = Node(parse_nvidia_smi(with_driver("580.65.06")), CUDA13, env)
    assert problems(fake, [], 1, hub=False) == []
    assert (home / ".cache" / "vllm").is_dir()  # the other caches go under that HOME
    [line] = problems(fake, [], 1)
    assert line.startswith(f"cache HF_HOME at {home / '.cache' / 'huggingface'} ")


@pytest.mark.parametrize(("spec", "indices"), [
    (None, [0, 1]), ("", []), ("-1", []), ("NoDevFiles", []), ("1", [1]), ("1,0", [1, 0]),
    ("0,7,1", [0]), ("GPU-bbbb", [1]), ("GPU-bbbb2222-0000,GPU-aaaa", [1, 0]), ("GPU-", []),
    ("GPU-ffff", []), ("0,0", [0])])
def test_cuda_visible_devices_chooses_the_gpus_as_cuda_reads_it(spec: str | None, indices: list[int]) -> None:
    assert [g.index for g in visible_gpus(parse_nvidia_smi(NODE), spec)] == indices


def test_a_mig_instance_is_visible_with_its_memory_unknown() -> None:
    [mig] = visible_gpus(parse_nvidia_smi(NODE), "MIG-GPU-bbbb2222-0000/1/0")
    assert (mig.index, mig.name, mig.driver, mig.free_mib) == (1, "MIG instance of NVIDIA H100 80GB HBM3",
                                                               "580.65.06", None)
    [mig] = visible_gpus(parse_nvidia_smi(NODE), "MIG-4f1c7e2a-aaaa")
    assert (mig.index, mig.uuid, mig.total_mib) == (-1, "MIG-4f1c7e2a-aaaa", None)
    [gpu] = visible_gpus(parse_nvidia_smi(H100), "GPU-1234")  # no uuids known: a GPU, memory unknown
    assert gpu.free_mib is None and gpu.driver == "570.86.15"


def test_free_memory_is_read_on_the_gpus_the_run_will_use(tmp_path: Path) -> None:
    fake = node(tmp_path, NODE)
    [line] = problems(fake, [0.5])  # every GPU visible: the first one is taken
    assert line.startswith("GPU 0 (NVIDIA H100 80GB HBM3): 1.0 GiB free")
    fake.env = {**fake.env, "CUDA_VISIBLE_DEVICES": "1"}
    assert problems(fake, [0.5]) == []
    fake.env = {**fake.env, "CUDA_VISIBLE_DEVICES": "GPU-bbbb,GPU-aaaa"}
    assert problems(fake, [0.85, 0.08]) == []  # the embedder shares the first GPU, not the second
    [line] = problems(fake, [0.85, 0.08], tensor_parallel=2)  # the llm's second worker on GPU 0
    assert line.startswith("GPU 0 (NVIDIA H100 80GB HBM3): 1.0 GiB free") and "shares 0.85 of it" in line


def test_fewer_visible_gpus_than_the_llms_tensor_parallelism_is_one_line(tmp_path: Path) -> None:
    fake = node(tmp_path, NODE)
    fake.env = {**fake.env, "CUDA_VISIBLE_DEVICES": "1"}
    [line] = problems(fake, [0.5], tensor_parallel=2)
    assert line.startswith("the run needs 2 GPUs (llm.tensor_parallel_size=2) but 1 is visible: ")
    assert "--gres=gpu:2" in line and "or change llm.tensor_parallel_size=2" in line
    assert problems(node(tmp_path, None, TorchFacts(True, "13.0", True, 1)), [0.5], tensor_parallel=2)
    assert problems(node(tmp_path, None, TorchFacts(True, "13.0", True, 2)), [0.5], tensor_parallel=2) == []
    fake.env = {**fake.env, "CUDA_VISIBLE_DEVICES": ""}
    [line] = problems(fake, [0.5])
    assert line.startswith("CUDA_VISIBLE_DEVICES='' leaves none of the 2 GPU(s)")


def test_a_vllm_job_needs_a_c_compiler_and_python_headers(tmp_path: Path) -> None:
    fake = node(tmp_path, with_driver("580.65.06"))
    fake.toolchain = Toolchain(None, None, "/opt/python/include/python3.12", False)
    compiler, headers = problems(fake, [0.5])
    assert "no C compiler (gcc or clang)" in compiler and "module load gcc" in compiler
    assert "no Python.h in /opt/python/include/python3.12" in headers and "python3-dev" in headers
    assert problems(fake, [], 1) == []  # a sentence-transformers embedder compiles nothing
    fake.toolchain = Toolchain("/opt/no/cc -O2", None, "/usr/include/python3.12", True)
    [line] = problems(fake, [0.5])
    assert line.startswith("CC=/opt/no/cc -O2 is not a command here")


def test_the_compiler_is_looked_up_as_triton_looks_it_up(tmp_path: Path) -> None:
    for name in ("cc", "clang"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    assert gpu_node.toolchain({"PATH": str(tmp_path)}).compiler == str(tmp_path / "clang")  # not `cc`
    assert gpu_node.toolchain({"PATH": str(tmp_path), "CC": "cc -m64"}).compiler == str(tmp_path / "cc")
    assert gpu_node.toolchain({"PATH": str(tmp_path / "none")}).compiler is None


@pytest.mark.parametrize(("env", "missing"), [
    ({}, None),
    ({"https_proxy": "http://proxy:3128"}, "localhost, 127.0.0.1, gpu042"),
    ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "localhost,127.0.0.1"}, "gpu042"),
    ({"http_proxy": "http://p:1", "no_proxy": "localhost,127.0.0.1,gpu042", "NO_PROXY": "*"}, None),
    ({"http_proxy": "http://p:1", "no_proxy": "localhost,127.0.0.1,gpu042", "NO_PROXY": "localhost"},
     "127.0.0.1, gpu042")])
def test_a_proxy_that_node_local_requests_would_take_is_a_warning(
    tmp_path: Path, env: dict[str, str], missing: str | None,
) -> None:
    fake = node(tmp_path, with_driver("580.65.06"))
    fake.env, fake.host = {**fake.env, **env}, "gpu042"
    assert problems(fake, [0.5]) == []  # a warning, not a failure
    found = warnings(fake)
    if missing is None:
        assert found == []
        return
    [line] = found
    assert f"does not cover {missing}:" in line and "no_proxy and NO_PROXY" in line
    assert "node domain" in line  # servers on other nodes: their domain too


def test_a_host_name_with_a_domain_needs_the_domain_around_the_proxy_too() -> None:
    env = {"https_proxy": "http://proxy:3128", "no_proxy": "localhost,127.0.0.1,gpu042.hpc.example"}
    line = gpu_node.proxy_warning(env, "gpu042.hpc.example")
    assert line is not None and "does not cover the node domain .hpc.example:" in line
    assert gpu_node.proxy_warning({**env, "no_proxy": env["no_proxy"] + ",.hpc.example"},
                                  "gpu042.hpc.example") is None


def test_env_sh_sends_this_nodes_names_around_the_proxy(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "memforest-bench").write_text("#!/bin/sh\n")
    (venv / "bin" / "memforest-bench").chmod(0o755)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "MEMFOREST_VENV": str(venv),
           "https_proxy": "http://proxy:3128", "no_proxy": ".corp.example"}
    script = 'source slurm/env.sh; printf "%s\\n" "$no_proxy" "$NO_PROXY" "$PYTORCH_NVML_BASED_CUDA_CHECK"'
    done = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    no_proxy, upper, nvml = done.stdout.splitlines()
    host = socket.gethostname()
    assert no_proxy.startswith(f".corp.example,localhost,127.0.0.1,::1,{host}") and upper == no_proxy
    assert nvml == "1"
    assert gpu_node.proxy_warning({**env, "no_proxy": no_proxy, "NO_PROXY": upper}, host) is None
    plain = {k: v for k, v in env.items() if k not in ("https_proxy", "no_proxy")}
    done = subprocess.run(["bash", "-c", script], cwd=REPO, env=plain, capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.splitlines()[:2] == ["", ""]  # no proxy: left alone


def test_the_configs_say_which_gpus_hold_what_and_whether_a_model_comes_from_the_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    llm = LLMConfig(backend="vllm", model="Qwen/Qwen3-4B-Instruct-2507", gpu_memory_utilization=0.8,
                    tensor_parallel_size=2)
    (tmp_path / "models" / "minilm").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    local = EmbedderConfig(backend="sentence_transformers", model="models/minilm", device="cuda")
    assert demand(llm, local) == Demand((GpuUse((0.8,), 2), GpuUse((0.8,), 1)),
                                        ("llm.tensor_parallel_size=2",), True, True)
    assert demand(None, local) == Demand((GpuUse((), 1),), (), False, False)  # a directory: no hub
    cpu = EmbedderConfig(backend="sentence_transformers", model="org/on-the-hub", device="cpu")
    assert demand(None, cpu) == Demand()  # nothing on the GPU
    served = LLMConfig(backend="openai", model="Qwen/Qwen3-4B-Instruct-2507")
    assert demand(served, None) == Demand()
    backbone = LLMConfig(backend="vllm", model="Qwen/Qwen3-30B-A3B-Instruct-2507-FP8",
                         gpu_memory_utilization=0.9)
    second = EmbedderConfig(backend="sentence_transformers", model="Qwen/Qwen3-Embedding-0.6B",
                            device="cuda:1")
    asked = demand(backbone, second)
    assert asked == Demand((GpuUse((0.9,), 1), GpuUse((), 1)), ("embedder.device=cuda:1",), True, True)
    one = node(tmp_path, with_driver("580.65.06", 74200))  # 0.9 of the GPU and one process fit, not two
    [line] = gpu_node.check(one, asked)
    assert line.startswith("the run needs 2 GPUs (embedder.device=cuda:1) but 1 is visible")
    two = node(tmp_path, NODE.replace("1000\n", "74200\n", 1))
    assert gpu_node.check(two, asked) == []
    with pytest.raises(gpu_node.PreflightError, match="needs 2 GPUs"):
        gpu_node.require_gpu_for(backbone, second, one)


def fake_node_env(tmp_path: Path, smi: str, cuda: str | None, available: bool) -> dict[str, str]:
    """PATH with an `nvidia-smi` printing `smi`, PYTHONPATH with a `torch` reporting `cuda`."""
    bin_dir, site = tmp_path / "bin", tmp_path / "site" / "torch"
    bin_dir.mkdir()
    site.mkdir(parents=True)
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\nprintf '%s' '{smi}'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    (site / "__init__.py").write_text(
        "import types\n"
        f"version = types.SimpleNamespace(cuda={cuda!r})\n"
        f"cuda = types.SimpleNamespace(is_available=lambda: {available!r})\n")
    caches = {name: str(tmp_path / "caches" / name.lower()) for name in gpu_node.CACHES}
    Path(caches["HF_HOME"]).mkdir(parents=True)  # filled by setup_env.sh (the jobs run offline)
    return {**os.environ, **caches, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO)])}


def run_preflight(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "benchmarks.harness.preflight", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_command_fails_with_one_line_per_problem_and_passes_a_good_node(tmp_path: Path) -> None:
    old = fake_node_env(tmp_path, with_driver("550.54.15", 1000), "13.0", False)
    done = run_preflight(old, "--share", "0.85", "--share", "0.08")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if not line.startswith("preflight warning: ")]
    assert len(lines) == 2 and all(line.startswith("preflight: ") for line in lines)
    assert ">= 580" in lines[0] and "GiB free" in lines[1]
    (tmp_path / "new").mkdir()
    new = fake_node_env(tmp_path / "new", with_driver("580.65.06"), "13.0", True)
    good = run_preflight(new, "--share", "0.85", "--share", "0.08")
    assert good.returncode == 0 and "preflight: ok (NVIDIA H100 80GB HBM3, driver 580.65.06" in good.stdout


def test_the_command_checks_the_gpu_cuda_visible_devices_names(tmp_path: Path) -> None:
    env = fake_node_env(tmp_path, NODE, "13.0", True)
    taken = run_preflight(env, "--share", "0.5")
    assert taken.returncode == 1 and "preflight: GPU 0 (NVIDIA H100 80GB HBM3): 1.0 GiB free" in taken.stderr
    free = run_preflight({**env, "CUDA_VISIBLE_DEVICES": "1"}, "--share", "0.5")
    assert free.returncode == 0 and "79.1 GiB free" in free.stdout, free.stderr


def test_the_command_reads_the_shares_from_the_configs(tmp_path: Path) -> None:
    env = fake_node_env(tmp_path, with_driver("580.65.06", 77200), "13.0", True)
    done = run_preflight(env, "llm=qwen3_30b_a3b", "embedder=qwen3_embedding_0p6b")
    assert done.returncode == 1 and "0.85+0.08" in done.stderr and "2 engine" in done.stderr
    cpu = run_preflight(env, "llm=smollm2_cpu", "embedder=minilm_cpu")
    assert cpu.returncode == 0 and "nothing to check" in cpu.stdout
    bad = run_preflight(env, "llm=no_such_model")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_the_harness_builds_no_gpu_model_on_a_node_that_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[object] = []
    monkeypatch.setattr(models, "build_chat_model", built.append)
    monkeypatch.setattr(models, "build_embedder", built.append)
    monkeypatch.setattr(gpu_node, "gather", lambda: node(tmp_path, with_driver("570.86.15")))
    with pytest.raises(ConfigError, match="driver 570.86.15 is too old"):
        models.chat_model(backend="vllm", model="m", gpu_memory_utilization=0.5)
    with pytest.raises(ConfigError, match="GPU preflight failed"):
        models.embedder(backend="sentence_transformers", model="m", device="cuda")
    assert built == []
    models.embedder(backend="sentence_transformers", model="m", device="cpu")  # no GPU: no preflight
    monkeypatch.setattr(gpu_node, "gather", lambda: node(tmp_path, with_driver("580.65.06")))
    models.chat_model(backend="vllm", model="m", gpu_memory_utilization=0.5)
    assert len(built) == 2
