"""A second process writing to a store that a test holds open, driven one command at a time.

Usage: python log_worker.py STORE USER. Reads commands from stdin, one a line, and answers each with
`ok <version>` once it has returned: `ingest FIRST COUNT` (sessions w{FIRST}.., one commit each),
`delete SESSION`, `correct SESSION`. The checkpoint every few commits that lets the log restart runs
inside the commit that is due (no background thread), so what the test measures depends on no
thread's timing."""

import sys

from store_worker import session

from memforest.api import MemForest
from memforest.config import MemForestConfig
from memforest.llm.testing import HashEmbedder, ScriptedChatModel
from memforest.store import read_snapshot


def main() -> None:
    store, user = sys.argv[1:3]
    read_snapshot.RELEASE_LOG_IN_BACKGROUND = False
    forest = MemForest(store, MemForestConfig(release_check_s=0, warm_tree_leaves=0), llm=ScriptedChatModel(),
                       embedder=HashEmbedder())
    for line in sys.stdin:
        command, *args = line.split()
        if command == "ingest":
            first, count = int(args[0]), int(args[1])
            for i in range(first, first + count):
                version = forest.ingest_sessions(user, [session(i)]).version
        elif command == "delete":
            version = forest.delete_session(user, args[0])["version"]
        elif command == "correct":
            fixed = session(int(args[0][1:]))
            fixed["turns"][0]["content"] += " Corrected: the place was Porto."
            version = forest.correct_session(user, fixed)["version"]
        else:
            raise SystemExit(f"unknown command {command!r}")
        print(f"ok {version}", flush=True)
    forest.close()


if __name__ == "__main__":
    main()
