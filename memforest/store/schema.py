"""SQLite schema of one user's memory. SQLite is the source of truth; FAISS files are caches."""

SCHEMA_VERSION = 7

DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
  session_id TEXT PRIMARY KEY, time REAL NOT NULL, turns TEXT NOT NULL, version INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_opened ON sessions(session_id, time);
CREATE TABLE IF NOT EXISTS cells (
  cell_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, idx INTEGER NOT NULL, turn_lo INTEGER NOT NULL,
  turn_hi INTEGER NOT NULL, time REAL NOT NULL, text TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS cells_in_order ON cells(session_id, idx, cell_id, turn_lo, turn_hi, time);
CREATE TABLE IF NOT EXISTS cell_sentences (cell_id TEXT PRIMARY KEY, words INTEGER NOT NULL, vectors BLOB);
CREATE TABLE IF NOT EXISTS facts (
  fact_id TEXT PRIMARY KEY, text TEXT NOT NULL, norm TEXT NOT NULL, origin TEXT NOT NULL,
  role TEXT NOT NULL, participants TEXT NOT NULL, entities TEXT NOT NULL, topics TEXT NOT NULL,
  time_text TEXT NOT NULL, event_start REAL, event_end REAL, attribute TEXT NOT NULL,
  domain TEXT NOT NULL, collection TEXT NOT NULL, embedding BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS facts_by_norm ON facts(norm, fact_id);
CREATE TABLE IF NOT EXISTS occurrences (
  fact_id TEXT NOT NULL, seq INTEGER NOT NULL, session_id TEXT NOT NULL, cell_id TEXT NOT NULL,
  turn_lo INTEGER NOT NULL, turn_hi INTEGER NOT NULL, source_time REAL NOT NULL, event_start REAL,
  event_end REAL, PRIMARY KEY (fact_id, seq)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS occurrences_by_session ON occurrences(session_id);
CREATE TABLE IF NOT EXISTS trees (
  tree_id TEXT PRIMARY KEY, rowid_ INTEGER NOT NULL UNIQUE, family TEXT NOT NULL, label TEXT NOT NULL,
  fanout INTEGER NOT NULL, root INTEGER, next_node_id INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS nodes (
  tree_id TEXT NOT NULL, node_id INTEGER NOT NULL, level INTEGER NOT NULL, parent INTEGER,
  children TEXT NOT NULL, t_lo REAL NOT NULL, item_lo TEXT NOT NULL, t_hi REAL NOT NULL,
  item_hi TEXT NOT NULL, count INTEGER NOT NULL, item TEXT, prev INTEGER, next INTEGER,
  text TEXT NOT NULL, mode TEXT NOT NULL, embedding BLOB NOT NULL, PRIMARY KEY (tree_id, node_id));
CREATE INDEX IF NOT EXISTS nodes_structure ON nodes(
  tree_id, node_id, level, parent, children, t_lo, item_lo, t_hi, item_hi, count, item, prev, next);
CREATE TABLE IF NOT EXISTS entities (label TEXT PRIMARY KEY, tree_id TEXT);
CREATE TABLE IF NOT EXISTS entity_facts (
  label TEXT NOT NULL, fact_id TEXT NOT NULL, PRIMARY KEY (label, fact_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS entity_sessions (
  label TEXT NOT NULL, session_id TEXT NOT NULL, facts INTEGER NOT NULL, \
PRIMARY KEY (label, session_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS scenes (
  scene_id TEXT PRIMARY KEY, domain TEXT NOT NULL, total BLOB NOT NULL, size INTEGER NOT NULL,
  t_last REAL NOT NULL, tree_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pending_cells (cell_id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS operations (
  version INTEGER PRIMARY KEY, kind TEXT NOT NULL, detail TEXT NOT NULL, time REAL NOT NULL);
"""

# Each older schema version and the statements that bring a store from it to the next one (run in one
# transaction with the version bump). 1 -> 2: an entity's facts and per-session counts become rows
# (edited per member) instead of JSON lists rewritten whole on every change. 2 -> 3: an index holding
# every node's place in its tree (`nodes_structure`), so a tree's structure is read from its run of
# index entries (small, adjacent) instead of from its rows among the texts and vectors of all the
# others (`memforest.store.tree_source`; ~2.6% more file). 3 -> 4: the vectors of a long cell's user
# sentences, written with the cell (`memforest.sentences`); a cell stored before has none, and a query
# embeds its sentences itself until `memforest migrate` stores them (`memforest.store.backfill`).
# 4 -> 5: indexes holding what an open reads of every cell (in session order) and fact (`cells_in_order`,
# `facts_opened`), so the open scans them instead of the rows' texts and vectors (~1.5% more file).
# 5 -> 6: the open reads no fact (`memforest.store.loaded_facts`): `facts_opened` goes, and an index of
# the facts by normalised text (`facts_by_norm`) finds an exact duplicate's fact in the store; the
# sessions' ids and times get an index of their own (`sessions_opened`), so the open reads them without
# the pages of the sessions' turns. 6 -> 7: the occurrences are kept in the order of their key (fact,
# sequence number: `WITHOUT ROWID`), so a fact's occurrences are one run of adjacent rows, not a row
# apiece among every other fact's (a fact said in thousands of sessions read in a few pages).
_OCCURRENCE_COLUMNS = ("fact_id TEXT NOT NULL, seq INTEGER NOT NULL, session_id TEXT NOT NULL, "
                       "cell_id TEXT NOT NULL, turn_lo INTEGER NOT NULL, turn_hi INTEGER NOT NULL, "
                       "source_time REAL NOT NULL, event_start REAL, event_end REAL")
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "ALTER TABLE entities RENAME TO entities_v1",
        "CREATE TABLE entities (label TEXT PRIMARY KEY, tree_id TEXT)",
        "CREATE TABLE entity_facts (label TEXT NOT NULL, fact_id TEXT NOT NULL, PRIMARY KEY "
        "(label, fact_id)) WITHOUT ROWID",
        "CREATE TABLE entity_sessions (label TEXT NOT NULL, session_id TEXT NOT NULL, facts "
        "INTEGER NOT NULL, PRIMARY KEY (label, session_id)) WITHOUT ROWID",
        "INSERT INTO entities SELECT label, tree_id FROM entities_v1",
        "INSERT INTO entity_facts SELECT DISTINCT e.label, j.value FROM entities_v1 e, json_each(e.facts) j",
        "INSERT INTO entity_sessions SELECT e.label, j.key, j.value FROM entities_v1 e, "
        "json_each(e.sessions) j",
        "DROP TABLE entities_v1",
    ),
    2: (
        "CREATE INDEX IF NOT EXISTS nodes_structure ON nodes(tree_id, node_id, level, parent, children, "
        "t_lo, item_lo, t_hi, item_hi, count, item, prev, next)",
    ),
    3: (
        "CREATE TABLE IF NOT EXISTS cell_sentences (cell_id TEXT PRIMARY KEY, words INTEGER NOT NULL, "
        "vectors BLOB)",
    ),
    4: (
        "CREATE INDEX IF NOT EXISTS cells_in_order ON cells(session_id, idx, cell_id, turn_lo, turn_hi, "
        "time)",
        "DROP INDEX IF EXISTS cells_by_session",
        "CREATE INDEX IF NOT EXISTS facts_opened ON facts(fact_id, norm, event_start)",
    ),
    5: (
        "CREATE INDEX IF NOT EXISTS facts_by_norm ON facts(norm, fact_id)",
        "DROP INDEX IF EXISTS facts_opened",
        "CREATE INDEX IF NOT EXISTS sessions_opened ON sessions(session_id, time)",
    ),
    6: (
        f"CREATE TABLE occurrences_v7 ({_OCCURRENCE_COLUMNS}, PRIMARY KEY (fact_id, seq)) WITHOUT ROWID",
        "INSERT INTO occurrences_v7 SELECT fact_id, seq, session_id, cell_id, turn_lo, turn_hi, source_time, "
        "event_start, event_end FROM occurrences ORDER BY fact_id, seq",
        "DROP TABLE occurrences",
        "ALTER TABLE occurrences_v7 RENAME TO occurrences",
        "CREATE INDEX IF NOT EXISTS occurrences_by_session ON occurrences(session_id)",
    ),
}
