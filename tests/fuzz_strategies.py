"""Generators of hostile inputs for the fuzz suite: session files, command lines, options, damage to a
store's database and index files, and faulty model replies."""

from __future__ import annotations

import json
import sqlite3
from datetime import date
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from memforest.store.validate import META_KEYS, TABLES

HOSTILE = ["\x00", "\udce9", "\ud800", "\x1b[31m", "\u202e", "\ufeff", "\n", "\t", " ", "\x7f", "\x01", "é",
           "𝔘"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(10**20), 10**20), st.floats(allow_nan=True),
                    st.text(max_size=12))
texts = st.one_of(st.text(max_size=30), st.lists(st.one_of(st.text(max_size=5), st.sampled_from(HOSTILE)),
                                                 max_size=8).map("".join),
                  st.integers(0, 5000).map(lambda n: "word " * n))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
dates = st.one_of(st.sampled_from(["2023-01-01", "2023/05/30 (Tue) 23:40", "1:56 pm on 8 May, 2023", "",
                                   "tomorrow", "2023-13-45", "0001-01-01", "9999-12-31", "1899-12-31",
                                   "2199-12-31T23:59", "in 99999999999 days", "1e300"]), scalars)
ids = st.one_of(st.sampled_from(["boston", "n1", "n2", "n3"]),
                st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:@+-]{0,12}", fullmatch=True), texts, scalars)
turns = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "", "USER", None, 3]),
                           "content": st.one_of(texts, scalars)},
                          optional={"timestamp": dates, "speaker": json_values}),
    json_values)
sessions = st.one_of(
    st.fixed_dictionaries({"session_id": ids, "timestamp": dates,
                           "turns": st.one_of(st.lists(turns, max_size=4), json_values)},
                          optional={"note": json_values}),
    json_values)
mild_texts = st.one_of(st.from_regex(r"[A-Za-z][A-Za-z ,.'0-9]{0,60}", fullmatch=True),
                       st.from_regex(r"I (live in|like|moved to) [A-Z][a-z]{2,9}\.", fullmatch=True),
                       st.tuples(st.text(min_size=1, max_size=20), st.sampled_from(HOSTILE)).map("".join))
plausible = st.fixed_dictionaries({
    "session_id": st.one_of(st.sampled_from(["n1", "n2", "boston"]),
                            st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True)),
    "timestamp": st.one_of(st.dates(date(1990, 1, 1), date(2030, 12, 31)).map(str),
                           st.sampled_from(["2023-05-01T10:00", "1:56 pm on 8 May, 2023"])),
    "turns": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]),
                                             "content": mild_texts}),
                      min_size=1, max_size=5)})
payloads = st.one_of(st.lists(sessions, min_size=1, max_size=3), json_values,
                     st.lists(plausible, min_size=1, max_size=3), st.lists(plausible, min_size=1, max_size=2))


def _dump(payload: Any, ascii_only: bool) -> bytes:
    return json.dumps(payload, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


session_files = st.one_of(
    st.tuples(payloads, st.booleans()).map(lambda t: _dump(*t)),
    st.tuples(payloads, st.integers(0, 400)).map(lambda t: _dump(t[0], True)[: t[1]]),
    st.binary(max_size=200),
    st.integers(1, 5000).map(lambda n: ("[" * n + "]" * n).encode()),
)

# ---------------------------------------------------------------- options

OPTION_KEYS = [
    "llm.model", "llm.instances", "llm.threads_per_instance", "llm.context_tokens", "llm.timeout_s",
    "llm.concurrency", "llm.max_retries", "llm.json_retries", "llm.backoff_s", "llm.seed", "llm.dtype",
    "embedder.dim", "embedder.batch_size", "embedder.model", "embedder.query_prefix", "chunk.max_turns",
    "chunk.max_chars", "chunk.gap_hours", "extraction.max_items", "extraction.max_fact_chars",
    "canon.candidates", "canon.min_cosine", "canon.max_llm_checks", "entity.min_facts", "entity.min_sessions",
    "entity.max_label_words", "scene.assign", "scene.second_assign", "scene.spawn", "scene.merge",
    "scene.time_bonus", "scene.time_window_days", "scene.max_size", "tree.fanout_session",
    "tree.fanout_entity", "tree.fanout_scene", "tree.summary_words", "tree.summary_mode", "tree.leaf_words",
    "query.mode", "query.top_trees", "query.fact_recall", "query.root_weight", "query.fact_weight",
    "query.beam", "query.final_units", "query.complete_expansion", "query.candidates", "query.lexical_weight",
    "query.session_weight", "query.date_weight", "query.date_lag_days", "query.relative_date_confidence",
    "query.repeat_penalty", "query.answer_max_tokens",
    "limits.turn_chars", "limits.turns_per_session", "limits.sessions_per_call", "limits.lock_wait_s",
    "degraded_ok", "llm.backend", "embedder.backend", "nonsense", "chunk.nonsense", "chunk", "llm.backend.x",
    "", ".", "a..b",
]
OPTION_VALUES = st.one_of(
    st.sampled_from(["abc", "-1", "0", "1", "2", "3", "1e309", ".nan", "-.inf", "true", "maybe", "null", "~",
                     "[1, 2]", "{a: 1}", "[unclosed", "'quoted'", "0x10", "1_000", "99999999999999999999", "",
                     " ", "=", "a=b", "extractive", "planner", "teleport", "0.5", "-0.5", "1e-9"]),
    st.integers(-(10**6), 10**6).map(str), st.floats().map(str), st.text(max_size=10))
PLAUSIBLE = ["chunk.max_turns=4", "chunk.max_turns=1", "chunk.max_chars=20", "chunk.gap_hours=0",
             "degraded_ok=true", "tree.fanout_session=3", "tree.fanout_scene=3",
             "tree.summary_mode=extractive", "tree.leaf_words=0", "tree.summary_words=1", "scene.assign=0.1",
             "scene.spawn=0.99", "scene.max_size=1", "canon.min_cosine=0", "canon.candidates=0",
             "canon.max_llm_checks=0", "extraction.max_items=1", "extraction.max_fact_chars=1",
             "entity.min_facts=1", "entity.min_sessions=1", "query.mode=planner", "query.top_trees=1",
             "query.final_units=1", "query.candidates=1", "query.beam=1", "query.complete_expansion=true",
             "limits.turn_chars=5", "limits.sessions_per_call=1", "limits.lock_wait_s=0", "llm.concurrency=1",
             "llm.concurrency=64", "embedder.dim=32", "embedder.batch_size=1"]
overrides = st.lists(st.one_of(st.tuples(st.sampled_from(OPTION_KEYS), OPTION_VALUES).map("=".join),
                               st.text(max_size=10), st.sampled_from(PLAUSIBLE), st.sampled_from(PLAUSIBLE)),
                     max_size=4)


def option_tree(items: list[str]) -> Any:
    """A nested mapping made of KEY=VALUE items (a config file's content)."""
    out: dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition("=")
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            node = child if isinstance(child, dict) else {}
        node[leaf] = value
    return out


config_files = st.one_of(st.none(), overrides.map(option_tree), json_values, st.text(max_size=40))

# ---------------------------------------------------------------- damage to a store

garbage = st.one_of(st.sampled_from([None, "", "x", -1, 2**62, 1.5, b"\x00\xff", b"", "[", "{}", "[[1,2]]",
                                     "null", float("nan"), "1e999"]), st.binary(max_size=20))
damages = st.lists(st.one_of(
    st.tuples(st.just("flip"), st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)),
                                        min_size=1, max_size=40)),
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("drop"), st.sampled_from(TABLES)),
    st.tuples(st.just("delete"), st.sampled_from(TABLES), st.integers(1, 4), st.integers(0, 3)),
    st.tuples(st.just("garble"), st.sampled_from(TABLES), st.integers(0, 20), garbage, st.integers(1, 4)),
    st.tuples(st.just("meta"), st.sampled_from(META_KEYS), garbage),
), min_size=1, max_size=3)


def damage(user_dir: Path, how: tuple[Any, ...]) -> None:
    """Apply one damage to a user's folder (database checkpointed, no WAL)."""
    db = user_dir / "memory.sqlite"
    kind = how[0]
    if kind == "flip":
        data = bytearray(db.read_bytes())
        for where, mask in how[1]:
            if data:
                data[int(where * len(data))] ^= mask
        db.write_bytes(bytes(data))
    elif kind == "truncate":
        db.write_bytes(db.read_bytes()[: int(how[1] * db.stat().st_size)])
    elif kind in ("drop", "delete", "garble", "meta"):
        _sql_damage(db, how)


def _sql_damage(db: Path, how: tuple[Any, ...]) -> None:
    try:
        con = sqlite3.connect(db)
    except sqlite3.Error:
        return
    try:
        kind, table = how[0], how[1]
        if kind == "drop":
            con.execute(f"DROP TABLE {table}")
        elif kind == "delete":
            con.execute(f"DELETE FROM {table} WHERE rowid % ? = ?", (how[2], how[3] % how[2]))
        elif kind == "garble":
            columns = [row[1] for row in con.execute(f"PRAGMA table_info({table})")]
            if not columns:
                return
            column = columns[how[2] % len(columns)]
            con.execute(f"UPDATE {table} SET {column} = ? WHERE rowid % ? = 0", (how[3], how[4]))
        else:
            con.execute("UPDATE meta SET value = ? WHERE key = ?", (how[2], table))
        con.commit()
    except (sqlite3.Error, UnicodeDecodeError):
        pass  # a damage SQLite itself refuses (NOT NULL, a file already broken)
    finally:
        con.close()


# ---------------------------------------------------------------- model faults

EXCEPTIONS = ["RuntimeError", "ValueError", "KeyError", "TimeoutError", "ConnectionError", "MemoryError",
              "RecursionError", "TransientModelError", "InvalidOutputError", "OSError", "ZeroDivisionError"]
STAGES = ["extract", "dedup", "summarize", "answer", "browse", "plan"]
behaviours = st.one_of(st.just("ok"), st.sampled_from(EXCEPTIONS).map(lambda e: ("raise", e)),
                       json_values.map(lambda v: ("json", v)), texts.map(lambda t: ("text", t)),
                       st.floats(0, 0.03).map(lambda s: ("slow timeout", s)))
model_plans = st.dictionaries(st.sampled_from(STAGES), behaviours, max_size=4)
secrets = st.tuples(st.from_regex(r"[A-Za-z0-9]{12,32}", fullmatch=True), st.sampled_from([
    "HTTP 401: Authorization: Bearer {s}", "rejected header authorization={s}", "bad key sk-{s}",
    "echo: Bearer {s} denied", "api_key={s} invalid", '{{"api-key": "{s}"}}', "x-api-key: {s}",
    "request headers {{'Authorization': 'Bearer sk-{s}'}}", '{{"authorization": "Bearer {s}"}}',
    "Authorization:Bearer {s}", "Proxy-Authorization: Basic {s}"]))
