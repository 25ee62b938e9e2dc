"""SLURM through Hydra: the launcher config composes and resolves, and a sweep through submitit's local
launcher, killed part-way and submitted again, finishes without redoing finished work (what a requeue
after preemption does on a cluster)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from benchmarks.harness.app import CONFIG_DIR, shown_multirun
from benchmarks.harness.results import RunFiles, read_jsonl

REPO = Path(__file__).resolve().parents[1]
FAKE_MODELS = ["llm.backend=scripted", "embedder.backend=hash", "embedder.dim=256"]
INSTANCES = 3


def bench(*args: str, **popen: Any) -> subprocess.Popen[bytes]:
    """`memforest-bench ARGS` of this checkout, in a process group of its own."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    return subprocess.Popen([sys.executable, "-m", "benchmarks.harness.app", *args], cwd=REPO, env=env,
                            start_new_session=True, **popen)


def test_the_slurm_launcher_config_is_shown_for_a_sweep() -> None:
    shown = bench("-m", "hydra/launcher=slurm", "--cfg", "hydra", stdout=subprocess.PIPE,
                  stderr=subprocess.STDOUT)
    out, _ = shown.communicate(timeout=120)
    text = out.decode()
    assert shown.returncode == 0, text
    assert "SlurmLauncher" in text and "requeue: true" in text and "mode: MULTIRUN" in text
    assert (shown_multirun(["--cfg", "hydra", "-m", "seed=1"])
            == ["--cfg", "hydra", "hydra.mode=MULTIRUN", "seed=1"])
    assert shown_multirun(["-m", "seed=0,1"]) == ["-m", "seed=0,1"]


def test_the_slurm_launcher_takes_cluster_settings_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMFOREST_SLURM_PARTITION", "h100")
    monkeypatch.setenv("MEMFOREST_SLURM_SETUP", "umask 027")
    monkeypatch.delenv("MEMFOREST_SLURM_ACCOUNT", raising=False)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3", job_name="memforest-bench"):
        cfg = compose("config", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert isinstance(launcher, dict)
    assert launcher["_target_"].endswith("SlurmLauncher")
    assert (launcher["partition"], launcher["account"]) == ("h100", None)
    assert launcher["setup"][0] == "umask 027"
    assert launcher["gpus_per_node"] == 1 and launcher["max_num_timeout"] > 0
    assert "module load" not in (CONFIG_DIR / "hydra" / "launcher" / "slurm.yaml").read_text()


def test_each_task_compiles_into_caches_on_its_own_node_and_loads_weights_offline(tmp_path: Path) -> None:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3", job_name="memforest-bench"):
        cfg = compose("config", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    setup = OmegaConf.to_container(cfg.hydra.launcher.setup, resolve=True)
    assert isinstance(setup, list)
    names = ["VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "HF_HUB_OFFLINE"]
    script = "\n".join([*map(str, setup), *(f'echo "{n}=${n}"' for n in names)])
    env = {k: v for k, v in os.environ.items() if k not in names}
    for task in ("101", "102"):  # two tasks of one array, on the same node
        task_env = {**env, "TMPDIR": str(tmp_path), "SLURM_JOB_ID": task}
        done = subprocess.run(["bash", "-c", script], env=task_env, capture_output=True, text=True,
                              check=True)
        seen = dict(line.split("=", 1) for line in done.stdout.splitlines())
        job_tmp = tmp_path / f"memforest-{task}"
        assert seen == {"VLLM_CACHE_ROOT": str(job_tmp / "vllm"), "TRITON_CACHE_DIR": str(job_tmp / "triton"),
                        "TORCHINDUCTOR_CACHE_DIR": str(job_tmp / "inductor"), "HF_HUB_OFFLINE": "1"}


def snapshot(run: Path) -> dict[str, Any]:
    """What a run directory holds: complete rows, and builds whose store was marked complete."""
    files = RunFiles(run, create=False)
    builds = read_jsonl(files.builds_path)
    return {"records": read_jsonl(files.records_path), "judgments": read_jsonl(files.judgments_path),
            "complete_builds": [b for b in builds if not b["error"]
                                and files.store_complete(b["instance_id"], b["build_id"])],
            "builds": builds}


@pytest.mark.slow
@pytest.mark.integration
def test_a_killed_sweep_submitted_again_skips_finished_work(tmp_path: Path) -> None:
    results = tmp_path / "results"
    runs = [results / "default" / "sample" / method / "smollm2_cpu" / f"seed{seed}"
            for method in ("memforest_embed", "flat_rag") for seed in (0, 1)]

    def submit(n: int) -> subprocess.Popen[bytes]:
        log = (tmp_path / f"submission{n}.log").open("wb")
        return bench("-m", "hydra/launcher=submitit_local", "method=memforest_embed,flat_rag", "seed=0,1",
                     *FAKE_MODELS, "llm.responder=responders:slow_harness_responder",
                     f"dataset.limit={INSTANCES}", f"output_root={results}",
                     f"hydra.sweep.dir={tmp_path / f'sweep{n}'}", "progress=false", stdout=log,
                     stderr=subprocess.STDOUT)

    first = submit(1)
    deadline = time.monotonic() + 300
    while not any(read_jsonl(run / "records.jsonl") for run in runs[:2]):
        assert first.poll() is None, (tmp_path / "submission1.log").read_text()
        assert time.monotonic() < deadline, "no record within 300 s"
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    at_kill = {run: snapshot(run) for run in runs}
    assert any(len(at_kill[run]["records"]) < INSTANCES for run in runs)

    second = submit(2)
    assert second.wait(timeout=600) == 0, (tmp_path / "submission2.log").read_text()
    for run in runs:
        before, after = at_kill[run], snapshot(run)
        pairs = [(r["question_id"], r["attempt"]) for r in after["records"]]
        assert len(pairs) == len(set(pairs)) == INSTANCES, run
        assert after["records"][: len(before["records"])] == before["records"], run  # kept, not redone
        verdicts = [(j["question_id"], j["attempt"], j["judge_id"]) for j in after["judgments"]]
        assert len(verdicts) == len(set(verdicts)) == INSTANCES, run
        answered = {r["instance_id"] for r in before["records"]}
        reopens = "memforest" in run.parts[-3]  # MemForest reopens a complete store; flat_rag rebuilds
        for build in before["complete_builds"]:
            if reopens or build["instance_id"] in answered:
                again = [b for b in after["builds"] if b["instance_id"] == build["instance_id"]]
                assert again == [build], run
    comparison = (tmp_path / "sweep2" / "comparison.md").read_text()
    for run in runs:
        assert f"| {run.parts[-3]} | smollm2_cpu | {run.name[4:]} | {INSTANCES} |" in comparison
