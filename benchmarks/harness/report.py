"""The summary of one run directory, computed from its files only, and its markdown table; and the
side-by-side table of several run directories (a sweep)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from analysis.rows import mean
from benchmarks.harness.input_kept import input_cell, input_figures, input_line
from benchmarks.harness.metrics import summarize
from benchmarks.harness.results import RunFiles
from benchmarks.harness.schema import BenchConfig

Row = Mapping[str, Any]
TOKENS = ("prompt_tokens", "cached_prompt_tokens", "completion_tokens")
LOADER_COUNTS = {  # run.json's dataset counts, as the summary names them
    "duplicate_sessions_dropped": "duplicate sessions dropped by the loader",
    "sessions_renamed": "repeated sessions kept under derived ids (<id>#2)",
    "unreadable_turns_dropped": "unreadable turns dropped by the loader",
    "instances_with_unreadable_turns": "instances with unreadable turns dropped",
    "empty_sessions_dropped": "sessions left without a readable turn, dropped",
}



def build_figures(builds: Sequence[Row]) -> dict[str, Any]:
    """Write-path cost per instance: wall time, turns/s, model calls, tokens, waves."""
    done = [b for b in builds if not b.get("error")]
    seconds = sum(float(b["build_seconds"]) for b in done)
    turns = sum(int(b["turns"]) for b in done)
    llm = [b.get("llm") or {} for b in done]
    out: dict[str, Any] = {
        "instances": len(done),
        "failed": len(builds) - len(done),
        "build_seconds_mean": mean([float(b["build_seconds"]) for b in done]),
        "build_seconds_total": seconds,
        "turns_per_second": turns / seconds if seconds > 0 else None,
        "llm_calls_mean": mean([float(x.get("calls", 0)) for x in llm]),
        "embedding_calls_mean": mean([float(x.get("embedding_calls", 0)) for x in llm]),
        "waves_mean": mean([float(x.get("waves", 0)) for x in llm]),
        "critical_path_seconds_mean": mean([float(x.get("critical_path_seconds", 0.0)) for x in llm]),
    }
    derived = [b["call_waves"] for b in done if b.get("call_waves")]  # from timestamps (harness/waves.py)
    for key in ("waves", "critical_path_seconds", "busy_seconds", "max_in_flight"):
        out[f"derived_{key}_mean"] = mean([float(d[key]) for d in derived])
    for key in TOKENS:
        out[f"{key}_mean"] = mean([float(x.get(key, 0)) for x in llm])
    stages: dict[str, dict[str, float]] = {}
    for x in llm:
        for stage, numbers in (x.get("by_stage") or {}).items():
            total = stages.setdefault(stage, {})
            for name, value in numbers.items():
                total[name] = total.get(name, 0) + value
    out["by_stage_total"] = stages
    systems = [b.get("system") or {} for b in done]
    out["degraded_total"] = sum(int(x.get("degraded", 0)) for x in systems)
    out["failed_cells_total"] = sum(len(x.get("failed_cells") or ()) for x in systems)
    out["input"] = input_figures(builds)
    return out


def query_figures(records: Sequence[Row]) -> dict[str, Any]:
    """Per-question query cost, from each question's first record: latency per stage and tokens."""
    first: dict[str, Row] = {}
    for row in sorted(records, key=lambda r: int(r.get("attempt", 0))):
        first.setdefault(str(row["question_id"]), row)
    rows = [r for r in first.values() if "latency" in r]
    stages = sorted({stage for r in rows for stage in r["latency"]})
    out: dict[str, Any] = {
        "questions": len(rows),
        "latency_mean": {s: mean([float(r["latency"][s]) for r in rows if s in r["latency"]])
                             for s in stages},
        "query_seconds_mean": mean([float(r["query_seconds"]) for r in rows if "query_seconds" in r]),
    }
    answered = [r for r in records if "answer_usage" in r]
    for key in TOKENS:
        retrieval = sum(int((r.get("retrieval_llm") or {}).get(key, 0)) for r in rows)
        answers = sum(int(r["answer_usage"].get(key, 0)) for r in answered)
        out[f"{key}_per_question"] = (retrieval + answers) / len(rows) if rows else None
    calls = sum(int((r.get("retrieval_llm") or {}).get("calls", 0)) for r in rows) + len(answered)
    out["llm_calls_per_question"] = calls / len(rows) if rows else None
    # tokens of the context handed to the answer model (records of older harnesses do not say)
    out["evidence_tokens_mean"] = mean([float(r["evidence_tokens"]) for r in rows if "evidence_tokens" in r])
    out["evidence_cut"] = sum(bool(r.get("evidence_cut")) for r in rows)
    out["prompt_cut"] = sum(bool(r.get("prompt_cut")) for r in rows)
    out["errors"] = sum(bool(r.get("error")) for r in records)
    return out


def judge_label(verdict: Row) -> str:
    return f"{verdict.get('judge_id', '')} ({verdict.get('judge_model', '')})"


def failures(records: Sequence[Row], builds: Sequence[Row],
             not_loaded: Sequence[Row] = ()) -> list[dict[str, str]]:
    """Every failure of the run as {instance_id, stage, reason}: the entries the loader could not read
    (stage `load`), then per instance its failed build and the first failed record of each other stage
    (a record's error reads `<stage>: <reason>`)."""
    out = [{"instance_id": str(f["instance_id"]), "stage": str(f["stage"]), "reason": str(f["reason"])}
           for f in not_loaded]
    found: dict[tuple[str, str], str] = {}
    for row in builds:
        if row.get("error"):
            found.setdefault((str(row["instance_id"]), "build"), str(row["error"]))
    for row in records:
        if row.get("error"):
            stage, sep, reason = str(row["error"]).partition(": ")
            found.setdefault((str(row["instance_id"]), stage if sep else "run"), reason if sep else stage)
    out += [{"instance_id": iid, "stage": stage, "reason": why}
            for (iid, stage), why in sorted(found.items())]
    return out


def failed_instances(failed: Sequence[Row]) -> int:
    return len({str(f["instance_id"]) for f in failed})


def dataset_load(files: RunFiles) -> dict[str, Any]:
    """The dataset as the latest invocation loaded it (run.json): counts and entries not loaded."""
    if not files.run_json.exists():
        return {}
    run = files.load_run()
    invocations = run.get("invocations") or [{}]
    return dict(invocations[-1].get("dataset") or run.get("dataset") or {})


def token_counter_name(files: RunFiles) -> str | None:
    """What counted the evidence tokens (run.json's `token_counter`, the latest invocation's)."""
    if not files.run_json.exists():
        return None
    run = files.load_run()
    counter = (run.get("invocations") or [{}])[-1].get("token_counter") or run.get("token_counter")
    if not counter:
        return None
    return str(counter["name"]) + ("" if counter.get("exact") else " (not the answer model's tokenizer)")


@dataclass(frozen=True)
class RunLabels:
    """What names a run in its summary and in the comparison table."""

    method: str
    dataset: str
    backbone: str  # the llm config's name
    seed: int
    simulated: bool  # the backbone was the latency-model server
    budget: str = "native"  # `native`, `shared <units>` or `tokens <tokens>`

    @classmethod
    def of(cls, cfg: BenchConfig) -> RunLabels:
        simulated = cfg.llm.latency_model is not None
        return cls(cfg.method.name, cfg.dataset.name, cfg.llm.name, cfg.seed, simulated,
                   budget_label(asdict(cfg.budget)))

    @classmethod
    def stored(cls, config: Row) -> RunLabels:
        """From the plain configuration a stored run.json records (runs of any harness version)."""
        llm = config["llm"]
        return cls(str(config["method"]["name"]), str(config["dataset"]["name"]), str(llm["name"]),
                   int(config["seed"]), bool(llm.get("latency_model")),
                   budget_label(config.get("budget") or {}))


def budget_label(budget: Row) -> str:
    """The budget a run answered under, from its (plain) budget node."""
    mode = str(budget.get("mode") or "native")
    if mode == "shared":
        return f"shared {budget.get('evidence')}"
    if mode == "tokens":
        return f"tokens {budget.get('evidence_tokens')}"
    return mode


def summarize_run(files: RunFiles, labels: RunLabels) -> dict[str, Any]:
    """Accuracy, recall, build and query figures of a run directory."""
    latest = {(str(r["question_id"]), int(r["attempt"])): r for r in files.records()}
    records = list(latest.values())
    verdicts = [{**v, "judge_id": judge_label(v)} for v in files.judgments()]
    builds = list(files.builds().values())
    loaded = dataset_load(files)
    blocks = summarize(records, verdicts, builds)
    key = f"{labels.method}/{labels.dataset}"
    block = dict(blocks.get(key) or {"method": labels.method, "dataset": labels.dataset,
                                      "questions": 0, "judges": {}, "retrieval": {}})
    block.update(backbone=labels.backbone, seed=labels.seed, simulated=labels.simulated, budget=labels.budget,
                 build=build_figures(builds),
                 query=query_figures(records),
                 failures=failures(records, builds, loaded.get("failures") or ()),
                 loader={key: int(loaded.get(key) or 0) for key in LOADER_COUNTS},
                 token_counter=token_counter_name(files))
    block["markdown"] = markdown(block)
    return block


def write_summary(files: RunFiles, labels: RunLabels) -> dict[str, Any]:
    summary = summarize_run(files, labels)
    files.summary_path.write_text(summary["markdown"], encoding="utf-8")
    return summary


# ---------------------------------------------------------------- markdown


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _accuracy_rows(judges: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for label, j in judges.items():
        k = max((int(n) for n in j["pass_at_k"]), default=1)
        rows.append([f"accuracy pass@1 [{label}]", _pct(j["accuracy"])])
        if k > 1:
            rows.append([f"accuracy pass@{k} [{label}]", _pct(j["pass_at_k"][str(k)])])
        rows.append([f"task-averaged / abstention [{label}]",
                     f"{_pct(j['task_averaged'])} / {_pct(j['abstention_accuracy'])}"])
        if j["unparsed"] or j["errors"]:
            rows.append([f"unparsed / failed verdicts [{label}]", f"{j['unparsed']} / {j['errors']}"])
    return rows


def _recall_rows(retrieval: Mapping[str, Any], dataset: str) -> list[list[str]]:
    rows = []
    session, turn = retrieval.get("session") or {}, retrieval.get("turn") or {}
    for k in (1, 5, 10):
        if session:
            rows.append([f"session recall_any@{k}", _pct(session.get(f"recall_any@{k}"))])
    for k in (5, 10):
        if turn and dataset == "locomo":
            rows.append([f"evidence recall@{k} (dia ids)", _pct(turn.get(f"recall@{k}"))])
        elif turn:
            rows.append([f"turn recall_any@{k}", _pct(turn.get(f"recall_any@{k}"))])
    if turn:  # every gold turn among the first 10 distinct turns retrieved
        rows.append(["turn recall_all@10", _pct(turn.get("recall_all@10"))])
    if session or turn:
        rows.append(["questions with retrieval gold", str(int((session or turn).get("questions", 0)))])
    return rows


def _served_recall_rows(retrieval: Mapping[str, Any], served: Mapping[str, Any]) -> list[list[str]]:
    """The served evidence's own recall, where the ranking scored above went on past it."""
    if not served or served == retrieval:
        return []
    session, turn = served.get("session") or {}, served.get("turn") or {}
    rows = []
    if session:
        rows.append(["session recall_any@1 / @5 / @10, served evidence only",
                     " / ".join(_pct(session.get(f"recall_any@{k}")) for k in (1, 5, 10))])
    if turn:
        rows.append(["turn recall_any@10 / recall_all@10, served evidence only",
                     " / ".join(_pct(turn.get(f"recall_{m}@10")) for m in ("any", "all"))])
    return rows


def _cost_rows(build: Mapping[str, Any], query: Mapping[str, Any]) -> list[list[str]]:
    latency = query["latency_mean"]
    stages = ", ".join(f"{s} {_num(v, 3)}" for s, v in latency.items() if s not in ("retrieve", "total"))
    return [
        ["instances built (failed)", f"{build['instances']} ({build['failed']})"],
        ["build seconds / instance", _num(build["build_seconds_mean"])],
        ["source turns / second", _num(build["turns_per_second"])],
        ["write LLM calls / instance", _num(build["llm_calls_mean"], 1)],
        *([["write embedding requests / instance (proxied)", _num(build["embedding_calls_mean"], 1)]]
          if build.get("embedding_calls_mean") else []),
        ["write tokens / instance: prompt / cached / completion",
         " / ".join(_num(build[f"{k}_mean"], 0) for k in TOKENS)],
        ["write waves / instance (critical path s)",
         f"{_num(build['waves_mean'], 1)} ({_num(build['critical_path_seconds_mean'])})"],
        *([["write waves from call timestamps / instance (critical path s)",
            f"{_num(build['derived_waves_mean'], 1)} ({_num(build['derived_critical_path_seconds_mean'])})"]]
          if build.get("derived_waves_mean") is not None else []),
        ["degraded summaries / failed cells (all instances)",
         f"{build['degraded_total']} / {build['failed_cells_total']}"],
        ["query latency mean, s", _num(query["query_seconds_mean"], 3)],
        ["query latency per stage, s", stages or "–"],
        ["query LLM calls / question (retrieval and answers)", _num(query["llm_calls_per_question"], 1)],
        ["query tokens / question: prompt / cached / completion",
         " / ".join(_num(query[f"{k}_per_question"], 0) for k in TOKENS)],
        ["evidence tokens / question (context handed to the answer model)",
         _num(query.get("evidence_tokens_mean"), 0)],
        *([["questions with evidence cut to the token budget", str(query["evidence_cut"])]]
          if query.get("evidence_cut") else []),
        *([["questions with evidence cut to the prompt's window (oldest first)", str(query["prompt_cut"])]]
          if query.get("prompt_cut") else []),
        ["failed records", str(query["errors"])],
    ]


def _category_table(judges: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    for label, j in judges.items():
        if not j["per_category"]:
            continue
        k = max(int(n) for n in j["per_category_pass_at_k"])
        head = ["category", "questions", "pass@1"] + ([f"pass@{k}"] if k > 1 else [])
        rows = [
            [c, str(j["per_category_questions"][c]), _pct(v)]
            + ([_pct(j["per_category_pass_at_k"][str(k)][c])] if k > 1 else [])
            for c, v in j["per_category"].items()
        ]
        lines += ["", f"Accuracy by category, judge {label}:", "", *_table(head, rows)]
    return lines


def markdown(block: Mapping[str, Any]) -> str:
    title = (f"## {block['method']} on {block['dataset']} "
             f"(backbone {block['backbone']}, seed {block['seed']})")
    if block.get("budget", "native") != "native":
        title += f" at budget {block['budget']}"
    if block.get("simulated"):
        title += " [simulated: latency-model server, not a real GPU run]"
    rows = [["questions", str(block["questions"])],
            ["input kept (turns)", input_cell(block["build"].get("input"))]]
    rows += _accuracy_rows(block["judges"])
    rows += _recall_rows(block["retrieval"], str(block["dataset"]))
    rows += _served_recall_rows(block["retrieval"], block.get("retrieval_served") or {})
    rows += _cost_rows(block["build"], block["query"])
    if block.get("token_counter"):
        rows.append(["evidence tokens counted by", str(block["token_counter"]).replace("|", "/")])
    loader = block.get("loader") or {}
    rows += [[label, str(loader[key])] for key, label in LOADER_COUNTS.items() if loader.get(key)]
    failed = block.get("failures") or []
    not_loaded = [f for f in failed if f["stage"] == "load"]
    if not_loaded:
        rows.append(["source entries not loaded", str(failed_instances(not_loaded))])
    lines = [title, "", *_table(["metric", "value"], rows), *_category_table(block["judges"])]
    lost = input_line(block["build"].get("input"))
    lines += ["", lost] if lost else []
    lines += _failure_lines(failed)
    return "\n".join(lines) + "\n"


def _failure_lines(failed: Sequence[Row]) -> list[str]:
    """All failures, one line each: `- <instance>: <stage>: <reason>`."""
    if not failed:
        return []
    lines = ["", f"Failed instances: {failed_instances(failed)}", ""]
    lines += [f"- {f['instance_id']}: {f['stage']}: {' '.join(str(f['reason']).split())[:300]}"
              for f in failed]
    return lines


# ---------------------------------------------------------------- several runs side by side

COMPARISON_HEAD = ("method", "backbone", "seed", "questions", "input kept", "accuracy", "recall@5",
                   "recall@10", "build s / inst", "write LLM calls / inst",
                   "write tokens / inst (prompt / cached / completion)", "query s", "query LLM calls / q",
                   "evidence tokens / q", "budget")


def comparison_row(files: RunFiles, labels: RunLabels) -> list[str]:
    """One run directory (its files and stored config) as a row of the comparison table."""
    backbone = labels.backbone + (" (simulated)" if labels.simulated else "")
    names = [labels.method, backbone, str(labels.seed)]
    if files.skipped_path.exists():
        reason = files.skipped_path.read_text(encoding="utf-8").strip()
        return [*names, "skipped: " + reason.replace("|", "/"), *["–"] * (len(COMPARISON_HEAD) - 5),
                labels.budget]
    block = summarize_run(files, labels)
    judges = list(block["judges"].values())
    accuracy = _pct(judges[0]["accuracy"]) if judges else "–"
    retrieval = block["retrieval"]
    session, turn = retrieval.get("session") or {}, retrieval.get("turn") or {}
    if labels.dataset == "locomo":
        recall = [turn.get(f"recall@{k}") for k in (5, 10)]
    else:
        recall = [session.get(f"recall_any@{k}") for k in (5, 10)]
    build, query = block["build"], block["query"]
    return [*names, str(block["questions"]), input_cell(build.get("input")), accuracy, _pct(recall[0]),
            _pct(recall[1]),
            _num(build["build_seconds_mean"]), _num(build["llm_calls_mean"], 1),
            " / ".join(_num(build[f"{k}_mean"], 0) for k in TOKENS),
            _num(query["query_seconds_mean"], 3), _num(query["llm_calls_per_question"], 1),
            _num(query["evidence_tokens_mean"], 0), labels.budget]


def comparison_markdown(run_dirs: Iterable[str | Path]) -> str:
    """The side-by-side table of several runs, grouped by dataset; accuracy is the first judge's pass@1,
    recall is session recall_any@k on LongMemEval and evidence recall@k (dia ids) on LoCoMo; evidence
    tokens are the mean tokens of context handed to the answer model per question, as the run's
    counter counted them (run.json `token_counter`)."""
    by_dataset: dict[str, list[list[str]]] = {}
    for run_dir in run_dirs:
        files = RunFiles(run_dir, create=False)
        labels = RunLabels.stored(files.load_run()["config"])
        by_dataset.setdefault(labels.dataset, []).append(comparison_row(files, labels))
    lines: list[str] = []
    for dataset, rows in by_dataset.items():
        lines += [f"## {dataset}: {len(rows)} runs side by side", "", *_table(COMPARISON_HEAD, rows), ""]
    return "\n".join(lines)
