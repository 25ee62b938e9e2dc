"""Synthetic materialised forests in the shape the seed paper reports for one LongMemEval-S instance
(~1,430 facts in ~250 trees), built directly through MemForest's state, routers-free and model-free,
for retrieval and merge microbenchmarks. Embeddings are clustered random unit vectors."""

from __future__ import annotations

import numpy as np

from memforest.config import MemForestConfig, with_host_policy
from memforest.resident.ondemand import NodeData
from memforest.state import UserState
from memforest.types import Cell, EntityStat, Fact, Occurrence, Scene, Session, Turn

DAY = 86400.0


def _unit(rng: np.random.Generator, center: np.ndarray, spread: float) -> np.ndarray:
    v = center + spread * rng.standard_normal(center.shape).astype(np.float32)
    return (v / np.linalg.norm(v)).astype(np.float32)


def build_state(
    user: str, seed: int, dim: int = 384, sessions: int = 48, cells_per_session: int = 5,
    facts_per_cell: int = 6, entity_trees: int = 30, scene_trees: int = 170,
    cfg: MemForestConfig | None = None,
) -> UserState:
    """A state with session, `entity:user`, entity and scene trees, every node summarised
    (extractive text) and embedded (mean of children)."""
    cfg = cfg or with_host_policy(MemForestConfig())  # a benchmark owns its process
    rng = np.random.default_rng(seed)
    st = UserState(user, embedder="synthetic", dim=dim)
    t0 = 1.6e9 + seed * 400 * DAY
    topic_centers = [_unit(rng, np.zeros(dim, np.float32), 1.0) for _ in range(scene_trees)]
    cell_vecs: dict[str, np.ndarray] = {}
    fact_vecs: list[np.ndarray] = []
    for s in range(sessions):
        sid, ts = f"{user}-s{s:03d}", t0 + s * 7 * DAY
        st.add_session(Session(sid, ts,
                               [Turn("user", f"turn {i}", ts) for i in range(2 * cells_per_session)]))
        st.session_cells[sid] = []
        for c in range(cells_per_session):
            cell = Cell(f"{sid}#{c}", sid, c, 2 * c, 2 * c + 1, ts + c * 60, f"synthetic dialogue {sid} {c}")
            st.cells[cell.id] = cell
            st.session_cells[sid].append(cell.id)
            for k in range(facts_per_cell):
                topic = int(rng.integers(scene_trees))
                fid = f"f-{user}-{s}-{c}-{k}"
                st.facts[fid] = Fact(fid, f"synthetic fact {fid} on topic {topic}", fid,
                                     "user" if k % 2 else "assistant", "detail", [],
                                     [f"ent{topic % entity_trees}"], [f"t{topic}"], "", None, None, "",
                                     f"d{topic % 5}", "",
                                     [Occurrence(sid, cell.id, 2 * c, 2 * c + 1, cell.time)])
                fact_vecs.append(_unit(rng, topic_centers[topic], 0.35))
            cell_vecs[cell.id] = _unit(rng, np.zeros(dim, np.float32), 1.0)
    st.fill_facts(list(st.facts), np.stack(fact_vecs) if fact_vecs else np.zeros((0, dim), np.float32))
    _grow_trees(st, cfg, cell_vecs, scene_trees, entity_trees)
    return st


def _grow_trees(st: UserState, cfg: MemForestConfig, cell_vecs: dict[str, np.ndarray], scenes: int,
                ents: int) -> None:
    for sid, cells in st.session_cells.items():
        info = st.add_tree(f"session:{sid}", "session", sid, cfg.tree.fanout_session)
        for cid in cells:
            info.tree.insert(cid, st.cells[cid].time)
    user = st.add_tree("entity:user", "entity", "user", cfg.tree.fanout_entity)
    for f in st.facts.values():
        topic = int(f.topics[0][1:])
        if f.origin == "user":
            user.tree.insert(f.id, f.time)
        label = f"ent{topic % ents}"
        stat = st.entities.setdefault(label, EntityStat(label, tree_id=f"entity:{label}"))
        stat.facts.add(f.id)
        stat.sessions[f.occurrences[0].session_id] = stat.sessions.get(f.occurrences[0].session_id, 0) + 1
        if f"entity:{label}" not in st.trees:
            st.add_tree(f"entity:{label}", "entity", label, cfg.tree.fanout_entity)
        st.trees[f"entity:{label}"].tree.insert(f.id, f.time)
        scene_id = f"scene:{topic + 1}"
        if scene_id not in st.scenes:
            st.scenes[scene_id] = Scene(scene_id, f.domain, np.zeros_like(st.fact_vecs[f.id]), 0, f.time,
                                        scene_id)
            st.add_tree(scene_id, "scene", "scene", cfg.tree.fanout_scene)
        sc = st.scenes[scene_id]
        sc.total, sc.size, sc.t_last = sc.total + st.fact_vecs[f.id], sc.size + 1, max(sc.t_last, f.time)
        st.trees[scene_id].tree.insert(f.id, f.time)
    st.next_scene = scenes + 1
    for info in st.trees.values():
        dirty = info.tree.take_dirty()
        info.tree.take_changes()
        for level in sorted(dirty):
            for nid in dirty[level]:
                node = info.tree.nodes[nid]
                if level == 0:
                    item = node.item or ""
                    vec = st.fact_vecs[item] if item in st.facts else cell_vecs[item]
                    st.nodes[(info.tree_id, nid)] = NodeData(f"leaf {item}", "leaf", vec)
                else:
                    kids = [st.nodes[(info.tree_id, c)].embedding for c in node.children]
                    mean = np.mean(kids, axis=0)
                    st.nodes[(info.tree_id, nid)] = NodeData(f"summary {info.tree_id} {nid}", "extractive",
                                                            (mean / np.linalg.norm(mean)).astype(np.float32))
