"""Where an ingest's wall time goes with the embedded models: LLM waves, embedding, and everything
else (chunking, canonical matching, routing, tree edits, SQLite commit, index update)."""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from memforest.api import MemForest
from memforest.commands import load_config
from memforest.config import MemForestConfig, with_host_policy
from memforest.demo import example_sessions
from memforest.llm.base import Embedder, EmbedKind
from memforest.llm.factory import build_embedder


class TimedEmbedder:
    """Counts the wall time spent in an embedder."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.name, self.dim, self.seconds = inner, inner.name, inner.dim, 0.0

    def embed(self, texts: Sequence[str], kind: EmbedKind = "passage") -> np.ndarray:
        t = time.perf_counter()
        try:
            return self.inner.embed(texts, kind)
        finally:
            self.seconds += time.perf_counter() - t

    def close(self) -> None:
        self.inner.close()


def profile(cfg: MemForestConfig | None = None, sessions: list[dict] | None = None) -> dict[str, Any]:
    cfg = cfg or with_host_policy(MemForestConfig())  # a benchmark owns its process
    embedder = TimedEmbedder(build_embedder(cfg.embedder))
    with tempfile.TemporaryDirectory() as d, MemForest(d, cfg, embedder=embedder) as forest:
        scheduler = forest.scheduler
        assert scheduler is not None
        embedder.embed(["warm-up"])
        embedder.seconds = 0.0
        t = time.perf_counter()
        report = forest.ingest_sessions("profile", sessions or example_sessions())
        wall = time.perf_counter() - t
        llm = scheduler.busy_seconds
    emb = embedder.seconds
    other = wall - llm - emb
    structural = sum(report.timings.get(k, 0.0) for k in ("chunk", "route", "commit", "index"))
    return {"wall_s": round(wall, 3), "llm_s": round(llm, 3), "embed_s": round(emb, 3),
            "other_s": round(other, 3), "llm_share": round(llm / wall, 4),
            "embed_share": round(emb / wall, 4), "non_model_share": round(other / wall, 4),
            "structural_share": round(structural / wall, 4), "llm_calls": report.llm_calls,
            "cells": report.cells, "facts": report.new_facts, "timings": report.timings}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-o", "--set", action="append", default=[], metavar="KEY=VALUE",
                        help="MemForestConfig overrides (default: the embedded models)")
    args = parser.parse_args(argv)
    row = profile(load_config(None, args.set))
    print("ingest profile of the bundled example with the embedded models "
          f"({row['cells']} cells, {row['llm_calls']} LLM calls, {row['facts']} facts)")
    print(f"  wall {row['wall_s']} s: LLM waves {row['llm_share']:.1%}, embedding {row['embed_share']:.1%}, "
          f"non-model {row['non_model_share']:.2%} (chunk+route+commit+index {row['structural_share']:.2%})")
    return row


if __name__ == "__main__":
    main()
