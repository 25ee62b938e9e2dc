"""The synthetic LongMemEval-S-like and LoCoMo-like files: real formats, evidence buried among near
misses, sessions repeated across haystacks, questions worded apart from their evidence."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from benchmarks.datasets import load_dataset
from benchmarks.datasets.synthetic import (
    LONGMEMEVAL_TYPE_COUNTS,
    write_locomo_like,
    write_longmemeval_s_sized,
)


def test_longmemeval_like_file(tmp_path: Path) -> None:
    path = write_longmemeval_s_sized(tmp_path / "lme.json", questions=40, sessions=20, turns=6)
    raw = json.loads(path.read_text())
    data = load_dataset("longmemeval_s", path=path)
    # one haystack of the 40 (every 38th, as 13 of the real 500) lists a session twice; the loader keeps
    # it once
    assert len(data.instances) == 40 and data.duplicate_sessions_dropped == 1
    assert sum(len(e["haystack_session_ids"]) - len(set(e["haystack_session_ids"])) for e in raw) == 1
    assert all(len({s.session_id for s in i.sessions}) == len(i.sessions) for i in data.instances)
    assert len({q.category for _, q in data.questions()} & set(LONGMEMEVAL_TYPE_COUNTS)) >= 5
    for instance in data.instances:
        (q,) = instance.questions
        ids = {s.session_id for s in instance.sessions}
        if q.abstention:
            continue
        assert q.evidence_sessions and set(q.evidence_sessions) <= ids and q.evidence_turns
        assert {t.split(":")[0] for t in q.evidence_turns} <= set(q.evidence_sessions)
        said = [t.content for s in instance.sessions for t in s.turns if t.turn_id in q.evidence_turns]
        assert all(q.question not in text for text in said)  # asked in other words
        assert len(instance.sessions) >= 15
    seen = Counter(sid for entry in raw for sid in entry["haystack_session_ids"])
    repeated = sum(n - 1 for n in seen.values() if n > 1) / sum(seen.values())
    assert 0.05 < repeated < 0.4
    contents: dict[str, object] = {}
    for entry in raw:  # a repeated session is the same session everywhere
        for sid, date, turns in zip(entry["haystack_session_ids"], entry["haystack_dates"],
                                    entry["haystack_sessions"]):
            assert contents.setdefault(sid, (date, turns)) == (date, turns)
    assistant = [len(t["content"]) for e in raw for s in e["haystack_sessions"] for t in s
                 if t["role"] == "assistant"]
    assert sum(assistant) / len(assistant) > 1000


def test_locomo_like_file(tmp_path: Path) -> None:
    path = write_locomo_like(tmp_path / "locomo.json", conversations=2, sessions=10, turns=12)
    data = load_dataset("locomo", path=path)
    assert len(data.instances) == 2
    for instance in data.instances:
        turns = {t.turn_id: t for s in instance.sessions for t in s.turns}
        speakers = {t.speaker for t in turns.values()}
        assert len(speakers) == 2
        categories = Counter(q.category for q in instance.questions)
        assert set(categories) == {"multi-hop", "temporal", "open-domain", "single-hop"}
        for q in instance.questions:
            assert q.evidence_turns and set(q.evidence_turns) <= set(turns)
            assert any((t.speaker or '') in q.question for t in (turns[e] for e in q.evidence_turns))
            if q.category == "multi-hop":
                assert len(q.evidence_turns) >= 2
            if q.category == "single-hop":
                assert (q.answer in turns[q.evidence_turns[0]].content
                        and q.question not in turns[q.evidence_turns[0]].content)
