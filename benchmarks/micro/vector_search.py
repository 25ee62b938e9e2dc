"""Vector search: MemForest's versioned vector tables against faiss, on the same rows, side by side.

Rows of MiniLM's width (384): random unit vectors; clustered ones shaped like MiniLM's (a shared
direction, tight neighbourhoods); and, with `--vectors`, real MiniLM vectors (the embedding cache a
harness run writes, `<run>/embeddings/vectors.sqlite`, or an .npy file). At each size a table is
filled, then changed by `--writes` versions that each upsert, remove and add `--changed` rows, so the
version searched has retired rows behind its live mask, as a served one has. Every structure below
is kept in step with the same writes (each write timed, interleaved), then searched on the same live
rows with the same queries, interleaved and repeated:

- table_exact: a `VectorTable` searched exactly (`search_meta` per query, as the retrieval path calls
  it; `above`, then `top` per query, for a batch);
- table_partitioned: the same rows under the library's partition bound (past `ROOTS_EXACT_ROWS` for
  the roots table, past `EXACT_ROWS` for cells and facts), at the sizes where the library partitions;
- numpy_flat: one product with a contiguous matrix of the live rows (no versions: the floor);
- numpy_masked: one product with every row any version wrote (append-only, as a table stores them),
  the version's retired rows set to -inf: what faiss_knn_masked does, in numpy;
- faiss_flat: an `IndexFlatIP` rebuilt from the live rows at every version;
- faiss_knn_masked: no index: faiss's search functions over every row any version wrote, stored
  as a table stores them (append-only), through the version's live mask (`IDSelectorBitmap`): the
  way faiss could search a table's own rows, shared by versions, with nothing to keep in step;
- faiss_flat_idmap: an `IndexIDMap2(IndexFlatIP)` changed in place (no versions: older readers
  would see the change);
- faiss_ivf: an `IndexIVFFlat` changed in place, with as many lists as partitions would be trained
  and as many probed as hold the table's probe size (`probe_size(k)` rows);

recall@k of the approximate ones and tie-tolerant agreement of the exact ones with exact scores.
Shapes: `BxK` is B queries for their top K (1x10: the roots, `QueryConfig.top_trees`; 1x200: the
cells and facts, `QueryConfig.candidates`); `B@F` is the write path's near-duplicate search (`above`
with the canonicaliser's floor over `NEAR_DUPLICATE_CANDIDATES` rows, faiss `range_search`).

Last, the share of a retrieval query's time taken by the vector searches `retrieve` issues, on
synthetic memories (`--memories`) and on a store a harness run built (`--store`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.micro.vector_rows import (
    DIM,
    Reference,
    Rows,
    Shape,
    Write,
    load_vectors,
    make_writes,
    parse_shapes,
    unit,
)
from benchmarks.micro.vector_searchers import (
    INSTALL_FAISS,
    VECTOR_FLAGS,
    FaissIndex,
    Searcher,
    TableVersions,
    build_searchers,
    import_faiss,
    partition_bound,
)
from memforest.config import CanonConfig, QueryConfig


def spread(samples: Sequence[float], scale: float) -> dict[str, float]:
    """Median and quartiles of `samples`, times `scale`."""
    a = np.asarray(samples) * scale
    return {q: round(float(np.percentile(a, p)), 3) for q, p in (("median", 50), ("p25", 25), ("p75", 75))}


def paired(times: dict[str, list[float]], base: str, scale: float) -> dict[str, dict[str, float]]:
    """Per method: the spread of its samples and the median of its ratios to `base`'s samples taken
    beside them."""
    out = {}
    for name, ts in times.items():
        ratios = spread(np.asarray(ts) / np.asarray(times[base]), 1.0)
        out[name] = {**spread(ts, scale), "ratio_to_" + base: ratios["median"],
                     "ratio_p25": ratios["p25"], "ratio_p75": ratios["p75"]}
    return out


def time_writes(searchers: dict[str, Searcher], writes: list[Write]) -> dict[str, list[float]]:
    """Seconds each method took to follow each write, in turn (the order rotating per write)."""
    names = list(searchers)
    times: dict[str, list[float]] = {n: [] for n in names}
    for i, w in enumerate(writes):
        for name in names[i % len(names):] + names[: i % len(names)]:
            t = time.perf_counter()
            searchers[name].write(w)
            times[name].append(time.perf_counter() - t)
    return times


def time_searches(searchers: dict[str, Searcher], batches: list[np.ndarray], shape: Shape,
                  reps: int) -> dict[str, list[float]]:
    """Seconds per query of each method, per repetition (the order rotating per repetition)."""
    names = list(searchers)
    queries = sum(len(b) for b in batches)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(reps):
        for name in names[r % len(names):] + names[: r % len(names)]:
            s = searchers[name]
            t = time.perf_counter()
            for b in batches:
                s.search(b, shape)
            times[name].append((time.perf_counter() - t) / queries)
    return times



def measure_size(rows: Rows, n: int, args: argparse.Namespace, faiss: Any | None) -> dict[str, Any]:
    keys = np.arange(n, dtype=np.int64)
    first = rows.take(n)
    writes = make_writes(rows, n, args.writes, args.changed, args.seed)
    queries = rows.take(args.queries)
    searchers, build_ms = build_searchers(keys, first, n + args.writes * args.changed + 1, faiss)
    write_times = time_writes(searchers, writes)
    exact = searchers["table_exact"]
    assert isinstance(exact, TableVersions)
    live_keys = np.array(list(exact.table.keys()), np.int64)
    ref = Reference(live_keys, exact.table.vectors(live_keys.tolist()).astype(np.float64)
                    @ queries.T.astype(np.float64))
    part = searchers.get("table_partitioned")
    parts = part.table.partitions if isinstance(part, TableVersions) else None
    out: dict[str, Any] = {
        "rows": rows.kind, "n": n, "live": len(live_keys), "writes": args.writes, "changed": args.changed,
        "partitions": len(parts) if parts is not None else None,
        "partition_bound": partition_bound(n), "build_ms": build_ms,
        "write_ms": paired(write_times, "table_exact", 1e3), "searches": []}
    for shape in args.shapes:
        batch = min(shape.batch, len(queries))
        batches = [queries[i: i + batch] for i in range(0, len(queries) - batch + 1, batch)]
        quality = {name: ref.quality([f for b in batches for f in s.search(b, shape)], shape)
                   for name, s in searchers.items()}
        times = time_searches(searchers, batches, shape, args.reps)
        row = {name: {**timed, **quality[name]} for name, timed in paired(times, "table_exact", 1e6).items()}
        ivf = searchers.get("faiss_ivf")
        out["searches"].append({"shape": shape.name, "candidates": shape.candidates,
                                "nprobe": ivf.nprobe(shape) if isinstance(ivf, FaissIndex) else None,
                                "us_per_query": row})
    return out


# ---- the retrieval path -----------------------------------------------------------------------

class _Given:
    """An embedder answering the questions asked from vectors computed beforehand (anything else from
    `inner`, when there is one), so that a retrieval's time holds no model call for its question."""

    def __init__(self, known: dict[str, np.ndarray], inner: Any = None) -> None:
        self.known, self.inner, self.name, self.dim = known, inner, "given", DIM

    def embed(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        if kind == "query" and all(t in self.known for t in texts):
            return np.stack([self.known[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)
        if self.inner is None:
            raise ValueError("only the questions asked have vectors here")
        return np.asarray(self.inner.embed(texts, kind))

    def close(self) -> None:
        pass


def issued_searches(snap: Any, qvec: np.ndarray, cfg: QueryConfig) -> None:
    """The vector searches `retrieve` issues for one question in the hybrid (embed) mode: the facts'
    and cells' top `candidates` (`fact_recall` at least) and the roots' top `top_trees`."""
    index = snap.index
    index.facts.search_meta(qvec, max(cfg.fact_recall, cfg.candidates))
    index.roots.search(qvec, cfg.top_trees)
    index.cells.search_meta(qvec, cfg.candidates)


def time_retrieval(snap: Any, asked: list[tuple[str, str, np.ndarray]], leaf_words: int,
                   embed: Callable[[str], object] | None = None, inner: Any = None) -> dict[str, Any]:
    """Per question (text, date, vector): `retrieve`'s time with its vector given, the time of the vector
    searches it issues and (with `embed`) of embedding the question, interleaved; the searches' share."""
    from baselines.base import RANKING_SESSIONS
    from memforest.retrieval.query import retrieve

    cfg = replace(QueryConfig(), rank_sessions=RANKING_SESSIONS)
    given = _Given({q: v for q, _, v in asked}, inner)
    steps: dict[str, Callable[[str, str, np.ndarray], object]] = {
        "retrieve": lambda q, d, v: retrieve(snap, q, d, cfg, given, None, {}, leaf_words),
        "searches": lambda q, d, v: issued_searches(snap, v, cfg),
    }
    if embed is not None:
        steps["embed"] = lambda q, d, v: embed(q)
    names = list(steps)
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for i, (question, date, qvec) in enumerate([asked[0], *asked]):  # the first one twice: a warm-up
        for name in names[i % len(names):] + names[: i % len(names)]:
            t = time.perf_counter()
            steps[name](question, date, qvec)
            if i:
                samples[name].append(time.perf_counter() - t)
    r, s = np.asarray(samples["retrieve"]), np.asarray(samples["searches"])
    tables = {t: len(getattr(snap.index, t)) for t in ("cells", "roots", "facts")}
    out = {"questions": len(asked), "rows": tables, "ms": {k: spread(v, 1e3) for k, v in samples.items()},
           "search_share": spread(s / r, 1.0)}
    if embed is not None:
        out["search_share_with_embedding"] = spread(s / (r + np.asarray(samples["embed"])), 1.0)
    return out


def stored_memory(args: argparse.Namespace) -> dict[str, Any]:
    """`time_retrieval` on a copy of the store `--store` (opening a store may write caches beside it),
    asked the questions of `--data` with their vectors from `--embedder`."""
    from benchmarks.datasets.longmemeval import load_longmemeval
    from benchmarks.micro.query_latency import data_file
    from memforest.api import MemForest
    from memforest.config import EmbedderConfig, MemForestConfig, TreeConfig
    from memforest.llm.factory import build_embedder

    with tempfile.TemporaryDirectory(prefix="memforest-vector-search-") as work:
        data = load_longmemeval(data_file(args.data, Path(work)))
        asked = [(q.question, q.question_date.isoformat() if q.question_date else "2024-01-01T00:00")
                 for inst in data.instances for q in inst.questions][: args.questions_asked]
        model = build_embedder(EmbedderConfig(backend=args.embedder, threads=args.threads))
        shutil.copytree(args.store, Path(work) / "store")
        config = MemForestConfig(tree=TreeConfig(summary_mode="extractive"))
        forest = MemForest(Path(work) / "store", config, embedder=model, generate=False)
        try:
            snap = forest.snapshot(args.user or forest.users()[0])
            vecs = model.embed([q for q, _ in asked], "query")
            result = time_retrieval(snap, [(q, d, v) for (q, d), v in zip(asked, vecs)],
                                    config.tree.leaf_words, lambda q: model.embed([q], "query"), model)
        finally:
            forest.close()
            model.close()
    return {"memory": f"store {args.store}", "embedder": model.name, **result}


def synthetic_memory(sessions: int, args: argparse.Namespace) -> dict[str, Any]:
    """`time_retrieval` on a synthetic forest of `sessions` sessions (30 facts and 5 cells each), asked
    its facts' texts, each with its fact's vector moved by noise of norm about 1."""
    from benchmarks.micro.synthetic_forest import build_state
    from memforest.config import TreeConfig
    from memforest.index.forest_index import ForestIndex
    from memforest.versions.snapshot import Snapshot

    state = build_state("u", seed=args.seed, sessions=sessions)
    snap = Snapshot(state, ForestIndex.build(state, state.dim))
    rng = np.random.default_rng(args.seed)
    ids = list(state.facts)
    asked = []
    for i in rng.choice(len(ids), size=min(args.questions_asked, len(ids)), replace=False).tolist():
        vec = state.fact_vecs[ids[i]] + 0.05 * rng.standard_normal(state.dim).astype(np.float32)
        asked.append((state.facts[ids[i]].text, "2024-01-01T00:00", unit(vec)))
    result = time_retrieval(snap, asked, TreeConfig().leaf_words)
    return {"memory": f"synthetic, {sessions} sessions", **result}


def retrieval_share(args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    if args.store is not None and args.questions_asked:
        out.append(stored_memory(args))
    for sessions in [int(s) for s in args.memories.split(",") if s] if args.questions_asked else []:
        out.append(synthetic_memory(sessions, args))
    return out


# ---- the suite --------------------------------------------------------------------------------

def machine(threads: int, faiss: Any | None) -> dict[str, Any]:
    """The CPU, its vector extensions, and the thread counts the measurements ran with."""
    info: dict[str, Any] = {"threads": threads, "numpy": np.__version__}
    try:
        fields = dict(ln.split(":", 1) for ln in Path("/proc/cpuinfo").read_text().splitlines() if ":" in ln)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        flags = set(fields.get("flags", "").split())
        info.update(cpu=fields.get("model name", ""), flags=sorted(flags & VECTOR_FLAGS))
    except OSError:
        pass
    try:
        from threadpoolctl import threadpool_info

        info["blas"] = [{"library": Path(p["filepath"]).name,
                         **{k: p.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}}
                        for p in threadpool_info()]
    except ImportError:
        info["blas"] = "threadpoolctl is not installed: BLAS threads left as they are"
    if faiss is not None:
        info.update(faiss=faiss.__version__, faiss_build=faiss.get_compile_options(),
                    faiss_omp_threads=faiss.omp_get_max_threads())
    return info


def _limits(threads: int) -> Any:
    """A context fixing every BLAS library's threads to `threads` (a no-op without threadpoolctl)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=threads)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="random,clustered", help="synthetic rows: random, clustered")
    parser.add_argument("--vectors", type=Path, default=None,
                        help="real vectors too: an embedding cache (vectors.sqlite) or an .npy file")
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--shapes", type=parse_shapes, default=parse_shapes("1x10,1x200,32x10,32@0.93"),
                        help=f"BxK top-k searches, B@F searches above a floor (the write path's: "
                             f"32@{CanonConfig().min_cosine})")
    parser.add_argument("--queries", type=int, default=32)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--writes", type=int, default=40, help="versions written before searching")
    parser.add_argument("--changed", type=int, default=32, help="rows each version changes, removes or adds")
    parser.add_argument("--threads", type=int, default=1, help="BLAS, OpenMP (faiss) and torch threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-faiss", dest="faiss", action="store_false")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    parser.add_argument("--questions-asked", type=int, default=50,
                        help="questions asked of each memory to time its searches' share (0: none)")
    parser.add_argument("--memories", default="480,3360", help="sessions of the synthetic memories asked "
                        "(30 facts each: 1.4e4 and 1e5 facts)")
    parser.add_argument("--store", type=Path, default=None, help="a MemForest store to ask too")
    parser.add_argument("--user", default=None, help="its user (default: the first)")
    parser.add_argument("--data", type=Path, default=None, help="LongMemEval-format questions for it "
                        "(default: the real slice in ../shared/data when present, else synthetic ones)")
    parser.add_argument("--embedder", default="sentence_transformers", help="its questions' embedder")
    args = parser.parse_args(argv)
    faiss = import_faiss() if args.faiss else None
    if args.faiss and faiss is None:
        print(INSTALL_FAISS)
    before = faiss.omp_get_max_threads() if faiss is not None else 0
    if faiss is not None:
        faiss.omp_set_num_threads(args.threads)
    try:
        with _limits(args.threads):
            result = _run(args, faiss)
    finally:
        if faiss is not None:
            faiss.omp_set_num_threads(before)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return result


def _run(args: argparse.Namespace, faiss: Any | None) -> dict[str, Any]:
    result: dict[str, Any] = {"machine": machine(args.threads, faiss), "sizes": [], "skipped": []}
    pool = load_vectors(args.vectors) if args.vectors is not None else None
    kinds = [k for k in args.rows.split(",") if k] + (["minilm"] if pool is not None else [])
    for kind in kinds:
        for n in [int(s) for s in args.sizes.split(",") if s]:
            try:
                rows = Rows(kind, args.seed, n, pool if kind == "minilm" else None)
                row = measure_size(rows, n, args, faiss)
            except ValueError as e:
                result["skipped"].append(f"{kind} at {n} rows: {e}")
                print(f"skipped {kind} at {n} rows: {e}")
                continue
            print(report(row), flush=True)
            result["sizes"].append(row)
    result["retrieval"] = retrieval_share(args)
    for r in result["retrieval"]:
        print(retrieval_report(r))
    return result


def report(row: dict[str, Any]) -> str:
    lines = [f"\n{row['rows']} rows: {row['n']} ({row['live']} live after {row['writes']} versions of "
             f"{row['changed']} changed rows; partitions: {row['partitions']})",
             f"{'write':>10}  " + "  ".join(f"{m}={v['median']}ms (x{v['ratio_to_table_exact']})"
                                            for m, v in row["write_ms"].items())]
    for s in row["searches"]:
        lines.append(f"{s['shape']:>10}  " + "  ".join(
            f"{m}={v['median']}us (x{v['ratio_to_table_exact']}, agree {v['agreement']}, "
            f"recall {v['recall']})"
            for m, v in s["us_per_query"].items()))
    return "\n".join(lines)


def retrieval_report(r: dict[str, Any]) -> str:
    ms = r["ms"]
    embed = (f", the question's embedding {ms['embed']['median']} ms (share with it "
             f"{r['search_share_with_embedding']['median']})" if "embed" in ms else "")
    return (f"\nretrieval on {r['memory']} ({r['rows']}; {r['questions']} questions): retrieve "
            f"{ms['retrieve']['median']} ms, its vector searches {ms['searches']['median']} ms (share "
            f"{r['search_share']['median']}){embed}")


if __name__ == "__main__":
    main()
