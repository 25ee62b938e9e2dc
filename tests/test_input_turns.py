"""Turns with nothing readable are left out of memory, not fatal: the session keeps its other turns,
and every turn keeps the index it was given (cells, occurrences and the stored session name it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memforest.api import MemForest
from memforest.cli import main
from memforest.config import ChunkConfig, LimitsConfig
from memforest.errors import InputError
from memforest.facts.chunking import chunk_session
from memforest.sessions import parse_sessions, readable
from memforest.types import Session, Turn

FAKE = ["-o", "llm.backend=scripted", "-o", "embedder.backend=hash", "-o", "embedder.dim=64"]
# nothing readable: whitespace, control characters (Cc) and format characters (Cf)
INVISIBLE = ["", " ", "\t\n\r", "\u200b", "\ufeff", "\u200c\u200d", "\u2060", "\u00ad", "\x01\x7f\x85",
             "\u00a0\u3000", " \u200b\ufeff\u00ad\t", "\u2028\u2029"]
VISIBLE = ["a", "  ok  ", "\u200bhi", "\U0001f600", "\u4f60\u597d", "\ue000", "-", "\u0301"]


def session(contents: list[str], sid: str = "s1") -> dict[str, Any]:
    return {"session_id": sid, "timestamp": "2023-05-01T10:00", "turns": [
        {"role": "user" if i % 2 == 0 else "assistant", "content": c} for i, c in enumerate(contents)]}


def said(i: int) -> str:
    return f"In turn {i} I mention that I live in city{i} and own item{i}."


# 8 turns, turns 1, 3 and 4 with nothing readable
MIXED = [said(0), "\u200b", said(2), " \ufeff ", "", said(5), said(6), said(7)]


@pytest.mark.parametrize("text", INVISIBLE)
def test_text_of_only_whitespace_control_or_format_characters_is_not_readable(text: str) -> None:
    assert not readable(text)


@pytest.mark.parametrize("text", VISIBLE)
def test_text_with_any_other_character_is_readable(text: str) -> None:
    assert readable(text)


def test_unreadable_turns_are_kept_blank_in_their_places() -> None:
    [parsed] = parse_sessions([session(MIXED)], LimitsConfig())
    assert [t.content for t in parsed.turns] == [said(0), "", said(2), "", "", said(5), said(6), said(7)]
    assert [t.role for t in parsed.turns] == ["user", "assistant"] * 4


def test_a_session_with_nothing_readable_is_refused_and_with_it_the_call() -> None:
    with pytest.raises(InputError, match=r"^session s2: nothing readable in any turn"):
        parse_sessions([session(MIXED), session(INVISIBLE, "s2")], LimitsConfig())


@pytest.mark.parametrize(("content", "message"), [
    ("a\x00b", "NUL"), ("caf\udce9", "not valid Unicode"), (12, "content must be a string"),
    ("x" * 51, "limits.turn_chars=50"), ("\u200b" * 51, "limits.turn_chars=50"), (None, "missing content"),
])
def test_hostile_content_is_still_refused_beside_readable_turns(content: Any, message: str) -> None:
    raw = session(["hi", "\u200b", "placeholder"])
    raw["turns"][2]["content"] = content
    limits = LimitsConfig(turn_chars=50 if message.startswith("limits") else 200_000)
    with pytest.raises(InputError, match=r"^session s1 turn 2") as refused:
        parse_sessions([raw], limits)
    assert message in str(refused.value)


def test_typed_sessions_are_held_to_the_same_rules() -> None:
    turns = [Turn("user", said(0), 0.0), Turn("assistant", "\u200b\u200b", 0.0), Turn("user", said(2), 0.0)]
    [parsed] = parse_sessions([Session("typed", 0.0, turns)], LimitsConfig())
    assert [t.content for t in parsed.turns] == [said(0), "", said(2)]
    with pytest.raises(InputError, match="nothing readable"):
        parse_sessions([Session("typed", 0.0, [Turn("user", "\ufeff", 0.0)])], LimitsConfig())
    with pytest.raises(InputError, match="NUL"):
        parse_sessions([Session("typed", 0.0, [Turn("user", "a\x00", 0.0)])], LimitsConfig())


def test_cells_skip_blank_turns_and_name_turns_by_their_given_index() -> None:
    [parsed] = parse_sessions([session(MIXED)], LimitsConfig())
    cells = chunk_session(parsed, ChunkConfig(max_turns=2))
    assert [(c.turn_lo, c.turn_hi) for c in cells] == [(0, 2), (5, 6), (7, 7)]
    assert "\u200b" not in "".join(c.text for c in cells) and all(c.text for c in cells)
    assert [c.text.count("\n") + 1 for c in cells] == [2, 2, 1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 30), st.integers(0, 10)), min_size=1, max_size=30),
       st.integers(0, 5), st.sampled_from([20, 60, 8000]))
def test_blank_turns_change_no_cell_but_its_turn_numbers(spec: list[tuple[bool, int, int]], max_turns: int,
                                                         max_chars: int) -> None:
    """Chunking a session with blank turns gives the cells of the session without them, with each
    cell's first and last turn renumbered to their places among all turns."""
    turns, t = [], 0.0
    for blank, size, hours in spec:
        t += hours * 3600.0
        turns.append(Turn("user", "" if blank else "w" * (size + 1), t))
    cfg = ChunkConfig(max_turns=max_turns, max_chars=max_chars)
    kept = [i for i, turn in enumerate(turns) if turn.content]
    with_blanks = chunk_session(Session("s", 0.0, turns), cfg)
    without = chunk_session(Session("s", 0.0, [turns[i] for i in kept]), cfg)
    assert [(c.id, c.time, c.text) for c in with_blanks] == [(c.id, c.time, c.text) for c in without]
    assert ([(c.turn_lo, c.turn_hi) for c in with_blanks]
            == [(kept[c.turn_lo], kept[c.turn_hi]) for c in without])


def test_ingest_keeps_the_session_and_its_turn_numbers_in_the_store(scripted_forest: Any,
                                                                    tmp_path: Path) -> None:
    forest = scripted_forest(path=tmp_path / "store")
    report = forest.ingest_sessions("u", [session(MIXED), session([said(0), said(1)], "s2")])
    assert (report.sessions, report.turns, report.turns_dropped) == (2, 7, 3)
    state = forest.snapshot("u").state
    cells = [state.cells[c] for c in state.session_cells["s1"]]
    assert [(c.turn_lo, c.turn_hi) for c in cells] == [(0, 2), (5, 6), (7, 7)]
    # a fact said in turn 7 is found in turn 7, and reloaded from the store it still is
    with MemForest(tmp_path / "store", forest.config, embedder=forest.embedder, generate=False) as reopened:
        stored = reopened.snapshot("u").state
        assert ([t.content for t in stored.sessions["s1"].turns]
                == [t.content for t in state.sessions["s1"].turns])
        assert stored.sessions["s1"].turns[7].content == said(7)
        spans = {(o.turn_lo, o.turn_hi) for f in stored.facts.values() for o in f.occurrences
                 if o.session_id == "s1" and "city7" in f.text}
        assert spans == {(7, 7)}
        assert reopened.check("u")["ok"]


def test_a_corrected_session_may_hold_unreadable_turns(scripted_forest: Any) -> None:
    forest = scripted_forest()
    forest.ingest_sessions("u", [session([said(0), said(1)])])
    report = forest.correct_session("u", session(MIXED))
    assert report["ingest"]["turns_dropped"] == 3
    state = forest.snapshot("u").state
    assert [(state.cells[c].turn_lo, state.cells[c].turn_hi) for c in state.session_cells["s1"]] == \
        [(0, 2), (5, 6), (7, 7)]
    with pytest.raises(InputError, match="nothing readable"):
        forest.correct_session("u", session(INVISIBLE))
    assert forest.snapshot("u").state.sessions["s1"].turns[7].content == said(7)


def test_the_command_line_reports_the_dropped_turns(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "s.json"
    data.write_text(json.dumps([session(MIXED)]))
    store = tmp_path / "store"
    assert main(["ingest", "--store", str(store), "--user", "u", *FAKE, str(data)]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert (report["turns"], report["turns_dropped"]) == (5, 3)
    assert "3 turn(s) with nothing readable" in err
    data.write_text(json.dumps([session(INVISIBLE, "s2")]))
    assert main(["ingest", "--store", str(store), "--user", "u", *FAKE, str(data)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "session s2: nothing readable in any turn" in err
