"""Every input gives success or a MemForestError with a message, and an error changes nothing."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memforest.describe import describe
from memforest.errors import MemForestError

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                    st.text(max_size=12))
dates = st.one_of(st.sampled_from(["2023-01-01", "2023/05/30 (Tue) 23:40", "1:56 pm on 8 May, 2023", "",
                                   "tomorrow", "2023-13-45", "9999-99-99T99:99"]), scalars)
turns = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "", None]),
                           "content": st.one_of(st.text(max_size=40), scalars)},
                          optional={"timestamp": dates}),
    scalars, st.lists(scalars, max_size=2),
)
sessions = st.one_of(
    st.fixed_dictionaries({"session_id": st.one_of(st.from_regex(r"[A-Za-z0-9_./-]{0,10}", fullmatch=True),
                                                   scalars),
                           "timestamp": dates, "turns": st.one_of(st.lists(turns, max_size=4), scalars)}),
    scalars,
)
payloads = st.one_of(st.lists(sessions, max_size=3), sessions, scalars)


@pytest.fixture(scope="module")
def forest(tmp_path_factory):
    from memforest.api import MemForest
    from memforest.config import MemForestConfig
    from memforest.llm.testing import HashEmbedder, ScriptedChatModel

    f = MemForest(tmp_path_factory.mktemp("fuzz"), MemForestConfig(), llm=ScriptedChatModel(),
                  embedder=HashEmbedder())
    f.ingest_sessions("u", [{"session_id": "seed", "timestamp": "2023-01-01",
                             "turns": [{"role": "user", "content": "I like green tea."}]}])
    yield f
    f.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=payloads, user=st.one_of(st.just("u"), st.text(max_size=8), scalars))
def test_ingest_inputs(forest, payload, user):
    safe_user = user if isinstance(user, str) and user.isalnum() else "u"
    before = describe(forest.snapshot("u").state)
    try:
        forest.ingest_sessions(user, payload)
    except MemForestError as e:
        assert str(e)
        assert describe(forest.snapshot("u").state) == before
        return
    assert isinstance(payload, list)
    assert forest.check(safe_user)["ok"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(question=st.one_of(st.text(max_size=30), scalars), date=dates,
       mode=st.one_of(st.none(), st.text(max_size=8)))
def test_query_inputs(forest, question, date, mode):
    try:
        result = forest.query("u", question, date=date, mode=mode, answer=False)
    except MemForestError as e:
        assert str(e)
        return
    json.dumps(result.to_dict())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.one_of(st.text(max_size=60), st.binary(max_size=60).map(lambda b: b.decode("latin-1"))))
def test_malformed_session_files(forest, tmp_path_factory, text, capsys):
    from memforest.cli import main

    path = tmp_path_factory.mktemp("files") / "sessions.json"
    path.write_text(text, encoding="utf-8")
    before = describe(forest.snapshot("u").state)
    code = main(["ingest", "--store", str(forest.root), "--user", "u", "-o", "llm.backend=scripted",
                 "-o", "embedder.backend=hash", "-o", "embedder.dim=256", str(path)])
    err = capsys.readouterr().err
    forest._resident.forget("u")
    after = forest.snapshot("u").state
    if code != 0:
        assert "memforest: error:" in err and "Traceback" not in err
        assert describe(after) == before
        return
    written = json.loads(text)  # success: the file held sessions, and now the store holds them too
    assert isinstance(written, list) and written
    assert {str(s["session_id"]) for s in written} <= set(after.sessions)
    assert forest.check("u")["ok"]
