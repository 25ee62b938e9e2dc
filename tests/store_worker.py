"""A separate process that writes to a store with the scripted model, for crash and concurrency tests.

Usage: python store_worker.py STORE USER FIRST COUNT LATENCY [reopen]
Ingests sessions w{FIRST}..w{FIRST+COUNT-1} one at a time; prints `done <session id>` after each
ingest has returned. With `reopen`, each session is ingested by a newly opened memory that queries
before it and is closed after it, so the caches beside the store are read and rewritten throughout."""

import sys

from memforest.api import MemForest
from memforest.config import MemForestConfig
from memforest.llm.testing import HashEmbedder, ScriptedChatModel


def session(i: int) -> dict:
    turns = []
    for t in range(6):
        role = "user" if t % 2 == 0 else "assistant"
        turns.append({"role": role,
                      "content": f"Worker session {i} line {t} mentions Lisbon and item{i}x{t}."})
    return {"session_id": f"w{i:04d}", "timestamp": f"2023-01-01T{i % 24:02d}:00:00", "turns": turns}


def _open(store: str, latency: str) -> MemForest:
    return MemForest(store, MemForestConfig(), llm=ScriptedChatModel(latency_s=float(latency)),
                     embedder=HashEmbedder())


def main() -> None:
    store, user, first, count, latency = sys.argv[1:6]
    reopen = sys.argv[6:7] == ["reopen"]
    forest = _open(store, latency)
    for i in range(int(first), int(first) + int(count)):
        if reopen:
            forest = _open(store, latency)
            if user in forest.users():
                forest.query(user, f"Lisbon item{i}x0", answer=False)
        forest.ingest_sessions(user, [session(i)])
        if reopen:
            forest.close()
        print(f"done w{i:04d}", flush=True)


if __name__ == "__main__":
    main()
