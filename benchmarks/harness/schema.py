"""The harness's configuration schema, registered with Hydra's ConfigStore.

Library knobs keep their defaults in `memforest.config` only: the `llm` and `embedder` groups are the
library's LLMConfig and EmbedderConfig (plus a label and a `_target_`), and a MemForest method's
`memforest` node is a MemForestConfig. Harness knobs have their defaults here. The YAML files under
`configs/` name a schema in their defaults list and hold only what differs from it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from memforest.config import EmbedderConfig, LLMConfig, MemForestConfig, QueryConfig


@dataclass
class LatencyModelNode:
    """A simulated backbone (`benchmarks.serving.latency_model`): answers come from `source` (`model`:
    this llm config's chat model; `replay`: the served_calls.jsonl at `replay_path`, falling back to
    the model when `fallback`) after a vLLM-shaped latency with these parameters. The defaults of the
    parameters live in LatencyParams; a named config sets them all."""

    name: str = MISSING
    source: str = "model"
    replay_path: str | None = None
    fallback: bool = True
    # requests in flight from in-process callers; null = llm.concurrency
    client_concurrency: int | None = None
    ttft_base_s: float = MISSING
    prefill_tokens_per_s: float = MISSING
    prefill_load: float = MISSING
    cached_cost: float = MISSING
    decode_s_per_token: float = MISSING
    decode_batch_slope: float = MISSING
    max_concurrency: int = MISSING
    block_chars: int = MISSING
    cache_blocks: int = MISSING
    # completion tokens charged per prompt kind (benchmarks.serving.output_caps); empty = uncapped
    output_caps: dict[str, int] = field(default_factory=dict)
    # items per array and characters per free-text string the content source decodes a JSON schema
    # under, where the schema sets no bound (benchmarks.serving.output_caps.SourceBounds); null = none
    source_max_items: int | None = None
    source_max_chars: int | None = None


@dataclass
class ChatModelNode(LLMConfig):
    """The `llm` group and a judge's `model`. `name` labels the backbone in result paths;
    `latency_model` makes it a simulated backbone (results labelled `simulated: true`)."""

    name: str = MISSING
    latency_model: LatencyModelNode | None = None
    _target_: str = "benchmarks.harness.models.chat_model"


@dataclass
class EmbedderNode(EmbedderConfig):
    name: str = MISSING
    _target_: str = "benchmarks.harness.models.embedder"


@dataclass
class MemForestNode(MemForestConfig):
    """A MemForest method's library configuration, with the run's backbone and embedder."""

    llm: Any = "${llm}"
    embedder: Any = "${embedder}"


@dataclass
class ServingNode:
    """How the harness serves the backbone and the embedder to a library baseline (behind the logging
    proxy). `context_tokens` is the context the backbone is served with (llama.cpp's n_ctx)."""

    context_tokens: int = MISSING
    threads: int = MISSING  # llama.cpp only
    max_tokens_cap: int | None = None  # clamp every request's max_tokens (CPU smoke runs)


@dataclass
class MethodNode:
    """A compared system. `system` is a `_target_` node: the adapter and its settings (those not set
    keep the adapter's defaults; run.json records every setting the adapter was built with)."""

    name: str = MISSING
    system: Any = MISSING
    needs_chat_model: bool = True  # on the write or retrieval path (answering builds it anyway)
    serving: ServingNode | None = None  # library baselines, reached over HTTP
    memforest: MemForestNode | None = None  # MemForest methods: the library configuration


@dataclass
class BudgetNode:
    """`native`: each method at its authors' retrieval budget (the method configs as they are);
    `shared`: every method at `evidence` units, through its `budget_method/shared_<method>` settings,
    which config.yaml's defaults list merges into the method node during composition;
    `tokens`: each method retrieves at its native budget, and the harness hands the answer model at
    most `evidence_tokens` tokens of it (the answer model's tokenizer; benchmarks/harness/context_budget).
    `run_suffix` is added to the run directory's experiment name (a token budget's runs apart)."""

    mode: str = "native"  # native | shared | tokens
    evidence: int = QueryConfig.final_units  # MemForest's own evidence budget
    evidence_tokens: int = 2000
    run_suffix: str = ""


@dataclass
class DatasetNode:
    name: str = MISSING
    judge: str = MISSING  # the judge id `judge=auto` uses for this dataset
    path: str | None = None  # a local file; null = the shipped sample, the cache, or a download
    limit: int | None = None
    instance_ids: list[str] | None = None
    subset: str | None = None  # a shipped id list (benchmarks/datasets/subsets), e.g. ablation60
    compose: int = 1  # N: each memory also holds the next N - 1 instances' sessions (datasets/compose.py)
    cache_dir: str | None = None
    include_adversarial: bool = False  # LoCoMo category 5
    # a versioned errata file (JSON or YAML, benchmarks/datasets/errata.py) applied after loading;
    # null = the official file untouched
    errata: str | None = None


@dataclass
class JudgeNode:
    """`_target_` builds the judge. Its model is the backbone (`model: null`) unless one is chosen,
    e.g. `+llm@judge.model=qwen3_30b_a3b_server`. Each response is judged `repeats` times, repeat r with
    seed `seed + r`; `allow_mixed` lets re-judging and comparison mix verdicts of different judges
    (`--mix-judges`)."""

    _target_: str = "benchmarks.judging.judges.Judge"
    judge_id: str = "${dataset.judge}"
    enabled: bool = True
    official_dir: str | None = None  # a LongMemEval checkout, for id=longmemeval-official
    max_tokens: int = 192
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    repeats: int = 1
    allow_mixed: bool = False
    model: ChatModelNode | None = None

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"judge.repeats must be at least 1, got {self.repeats}")
        if not 0.0 <= self.temperature <= 2.0 or not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"judge.temperature must be in [0, 2] and judge.top_p in (0, 1], got "
                             f"{self.temperature} and {self.top_p}")


@dataclass
class AnswerNode:
    enabled: bool = True  # false: retrieval only, no chat model for answering
    max_tokens: int = 256
    temperature: float = 0.7  # for attempts after the first (attempt 0 is greedy)


BOOTSTRAP_UNITS = ("question", "conversation")


@dataclass
class BootstrapNode:
    """Bootstrap confidence intervals of the report: `resamples` draws with `seed`, a two-sided `level`
    interval, resampling whole questions or whole conversations (`unit`: a LoCoMo conversation's
    questions share one memory)."""

    resamples: int = 2000
    seed: int = 0
    level: float = 0.95
    unit: str = "question"  # question | conversation

    def __post_init__(self) -> None:
        if self.unit not in BOOTSTRAP_UNITS:
            raise ValueError(f"bootstrap.unit must be one of {', '.join(BOOTSTRAP_UNITS)}, got {self.unit!r}")
        if self.resamples < 1 or not 0.0 < self.level < 1.0:
            raise ValueError(f"bootstrap.resamples must be at least 1 and bootstrap.level in (0, 1), got "
                             f"{self.resamples} and {self.level}")


@dataclass
class WandbNode:
    enabled: bool = False
    mode: str = "offline"  # offline | online
    project: str = "memforest"
    entity: str | None = None
    tags: list[str] = field(default_factory=list)


@dataclass
class BenchConfig:
    """One run = (experiment, dataset, method, backbone, seed), in a deterministic directory."""

    method: MethodNode = MISSING
    dataset: DatasetNode = MISSING
    llm: ChatModelNode = MISSING
    embedder: EmbedderNode = MISSING
    judge: JudgeNode = field(default_factory=JudgeNode)
    budget: BudgetNode = field(default_factory=BudgetNode)
    answer: AnswerNode = field(default_factory=AnswerNode)
    bootstrap: BootstrapNode = field(default_factory=BootstrapNode)
    wandb: WandbNode = field(default_factory=WandbNode)
    experiment_name: str = "default"
    seed: int = 0
    attempts: int = 1  # answer samples per question (pass@1..k)
    output_root: str = "results"
    run_dir: str = ("${output_root}/${experiment_name}${budget.run_suffix}/${dataset.name}/${method.name}/"
                    "${llm.name}/seed${seed}")
    keep_stores: bool = True  # keep each instance's store (a resumed run reuses finished builds)
    # cache vectors by (model, settings, text) in <run_dir>/embeddings when embedder.cache_dir is unset
    embed_cache: bool = False
    retry_errors: bool = False  # on resume, redo records whose build, retrieval or answer failed
    # a run directory whose completed stores are copied instead of building (the same write path, e.g.
    # a retrieval ablation over one memory); builds.jsonl then names the source run (`reused_from`)
    stores_from: str | None = None
    task: str = "qa"  # qa (build, retrieve, answer, judge) | migration | scaling (benchmarks/harness/tasks)
    task_options: dict[str, Any] = field(default_factory=dict)  # the task's settings (see its module)
    progress: bool = True


def register() -> None:
    """Register the schemas; the YAML files refer to them by these names."""
    if not OmegaConf.has_resolver("join"):  # `${join:${x}}`: a list as `a+b+c` (run directory names)
        OmegaConf.register_new_resolver("join", lambda items: "+".join(str(i) for i in items))
    store = ConfigStore.instance()
    store.store(name="bench_schema", node=BenchConfig)
    store.store(group="method", name="_schema", node=MethodNode)
    store.store(group="dataset", name="_schema", node=DatasetNode)
    store.store(group="llm", name="_schema", node=ChatModelNode)
    store.store(group="embedder", name="_schema", node=EmbedderNode)
    store.store(group="judge", name="_schema", node=JudgeNode)
    store.store(group="budget", name="_schema", node=BudgetNode)


def bench_config(cfg: DictConfig) -> BenchConfig:
    """The composed configuration as the harness receives it: one typed BenchConfig, every
    interpolation resolved and every mandatory value present (else an error here, before any work)."""
    out = OmegaConf.to_object(cfg)
    if not isinstance(out, BenchConfig):
        raise TypeError(f"expected a composed BenchConfig, got {type(out).__name__}")
    return out


def plain_config(cfg: BenchConfig) -> dict[str, Any]:
    """The configuration as plain JSON-ready containers, as run.json records it (what `--cfg job`
    prints, resolved)."""
    return asdict(cfg)
