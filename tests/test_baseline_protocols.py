"""Each adapter drives its library as the library's authors evaluate it. Recording stubs that mirror
the upstream APIs (tests/fixtures/upstream) stand in for the libraries: MemoryOS and MemPalace in
process, LightMem and EverMemOS as stub checkouts driven by the real workers over the JSON-lines
protocol. The tests assert what reaches each library: units, roles, speakers, timestamps, settings."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shutil
import sys
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from baselines.base import Endpoints, Session, SystemUnavailable, Turn
from baselines.upstream import checkout_commit

UPSTREAM = Path(__file__).parent / "fixtures" / "upstream"
PREFIX = "Instruct: find notes\nQuery: "


def endpoints() -> Endpoints:
    return Endpoints("http://127.0.0.1:9/v1", "backbone", "embedder", 2, 8192)


def chat() -> list[Session]:
    """LongMemEval shape: user/assistant roles, no speaker names; the second session starts with a reply."""
    s1 = Session("s1", datetime(2023, 3, 1, 9), (
        Turn("user", "I adopted a grey cat called Miso.", None, "s1:0"),
        Turn("assistant", "Miso is a lovely name.", None, "s1:1"),
        Turn("user", "She needs a vet.", None, "s1:2"),
        Turn("assistant", "Try the clinic on Main Street.", None, "s1:3")))
    s2 = Session("s2", datetime(2023, 4, 2, 9), (
        Turn("assistant", "Welcome back!", None, "s2:0"),
        Turn("user", "I moved to Lisbon for a new job.", None, "s2:1"),
        Turn("assistant", "Lisbon is sunny.", None, "s2:2")))
    return [s1, s2]


def conversation() -> list[Session]:
    """LoCoMo shape: two named people, both role "user"; Bo speaks twice in a row in the second session."""
    def turn(sid: str, i: int, who: str, text: str) -> Turn:
        return Turn("user", text, None, f"{sid}:{i}", speaker=who)

    s1 = Session("c1", datetime(2023, 5, 8, 13, 56), (
        turn("c1", 0, "Ana", "My cat Miso turned two."), turn("c1", 1, "Bo", "Happy birthday to Miso!")))
    s2 = Session("c2", datetime(2023, 5, 8, 14, 0), (  # four minutes later: the 30 s stagger must shrink
        turn("c2", 0, "Bo", "I got a job in Lisbon."), turn("c2", 1, "Bo", "I start next week."),
        turn("c2", 2, "Ana", "Congratulations!"), turn("c2", 3, "Ana", "Send photos."),
        turn("c2", 4, "Bo", "I will."), turn("c2", 5, "Ana", "Bye."), turn("c2", 6, "Bo", "Bye!"),
        turn("c2", 7, "Ana", "x"), turn("c2", 8, "Bo", "y"), turn("c2", 9, "Ana", "z")))
    return [s1, s2]


def b_first() -> list[Session]:
    """LoCoMo shape where speaker_b (Bo) speaks first, as in 6 of the 10 real conversations: the order
    comes from `Session.speakers` (speaker_a, speaker_b), not from who opens."""
    def turn(sid: str, i: int, who: str, text: str) -> Turn:
        return Turn("user", text, None, f"{sid}:{i}", speaker=who)

    pair = ("Ana", "Bo")
    s1 = Session("c1", datetime(2023, 5, 8, 13, 56), (
        turn("c1", 0, "Bo", "I got a job in Lisbon."), turn("c1", 1, "Ana", "Congratulations!"),
        turn("c1", 2, "Bo", "I start on Monday.")), speakers=pair)
    s2 = Session("c2", datetime(2023, 6, 1, 10), (
        turn("c2", 0, "Ana", "How is Lisbon?"), turn("c2", 1, "Bo", "Sunny.")), speakers=pair)
    return [s1, s2]


def all_texts(sessions: Sequence[Session]) -> list[str]:
    return [t.content for s in sessions for t in s.turns]


@contextlib.contextmanager
def stub_packages(monkeypatch: pytest.MonkeyPatch, folder: str, packages: tuple[str, ...]) -> Iterator[None]:
    """Import `packages` from the stub folder while the block runs; afterwards the real packages (when
    installed and already imported) are back in sys.modules and no stub module stays there."""
    def ours() -> list[str]:
        return [m for m in sys.modules if m.split(".")[0] in packages]

    for name in ours():
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(UPSTREAM / folder))
    try:
        yield
    finally:
        for name in ours():
            del sys.modules[name]


# ---------------------------------------------------------------- MemoryOS (memoryos-pro, in process)


class RecordingEmbedder:
    name, dim = "recording", 2

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], str]] = []

    def embed(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        self.calls.append((list(texts), kind))
        return np.ones((len(texts), 2), dtype=np.float32) / np.sqrt(2)

    def close(self) -> None:
        pass


@pytest.fixture
def memoryos_stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    if importlib.util.find_spec("faiss") is None:
        pytest.skip("faiss is not installed")
    with stub_packages(monkeypatch, "memoryos_pro", ("memoryos",)):
        import memoryos.memoryos as stub

        yield stub


def run_memoryos(sessions: list[Session], tmp_path: Path,
                 **settings: object) -> tuple[object, object, RecordingEmbedder, dict]:
    from baselines.memoryos import MemoryOSSystem

    system = MemoryOSSystem(endpoints(), query_prefix=PREFIX, **settings)  # type: ignore[arg-type]
    embedder = RecordingEmbedder()
    system.embedder = embedder
    system.reset("instance-1", tmp_path)
    mos = system.mos
    stats = system.ingest(sessions)
    result = system.retrieve("Where did I move?", datetime(2023, 5, 1))
    assert result.context == system.render(result.evidence)  # one rendering path
    system.close()
    return mos, result, embedder, stats


def test_memoryos_pairs_by_role_with_the_paper_settings(memoryos_stub: object, tmp_path: Path) -> None:
    mos, result, embedder, stats = run_memoryos(chat(), tmp_path)
    assert mos.settings["short_term_capacity"] == 7 and mos.settings["retrieval_queue_capacity"] == 10  # type: ignore[attr-defined]
    search = mos.retriever.calls[0]  # type: ignore[attr-defined]
    assert search["top_k_sessions"] == 5
    assert {search[k]
            for k in ("segment_similarity_threshold", "page_similarity_threshold",
                      "knowledge_threshold")} == {0.1}
    pages = [(p["user_input"], p["agent_response"]) for p in mos.added]  # type: ignore[attr-defined]
    # a session opened by a reply: the reply joins the last page, as upstream pairs it across sessions
    assert pages == [("I adopted a grey cat called Miso.", "Miso is a lovely name."),
                     ("She needs a vet.", "Try the clinic on Main Street.\nWelcome back!"),
                     ("I moved to Lisbon for a new job.", "Lisbon is sunny.")]
    assert [p["timestamp"] for p in mos.added] == ["2023-03-01 09:00:00"] * 2 + ["2023-04-02 09:00:00"]  # type: ignore[attr-defined]
    assert stats["input"] == {"given": 7, "kept": 7, "unit": "pages", "stored": 3, "lost": {},
                              "upstream": True}
    # The question alone is embedded as a query (with the run's instruction); pages as passages.
    assert [c for c in embedder.calls if c[1] == "query"] == [(["Where did I move?"], "query")]
    assert all("Where did I move?" not in c[0] for c in embedder.calls if c[1] == "passage")
    # The answer context keeps every retrieved page's meta_info, and all pages were flushed to mid-term.
    assert result.trace["pages"] == 3 and result.trace["pages_with_meta_info"] == 3  # type: ignore[attr-defined]
    assert "Conversation chain overview:(chain 0)" in result.context  # type: ignore[attr-defined]
    assert result.evidence[0].session_ids == ["s1"] and result.evidence[0].turn_ids == ["s1:0", "s1:1"]  # type: ignore[attr-defined]


def test_memoryos_pairs_locomo_speakers_and_names_them_once(memoryos_stub: object, tmp_path: Path) -> None:
    from baselines.memoryos.protocol import NO_REPLY

    mos, result, _, stats = run_memoryos(conversation(), tmp_path)
    pages = [(p["user_input"], p["agent_response"]) for p in mos.added]  # type: ignore[attr-defined]
    # Ana (speaker_a) opens, Bo replies; Bo's two turns opening the next session join the last page
    assert pages[0] == ("My cat Miso turned two.",
                        "Happy birthday to Miso!\nI got a job in Lisbon.\nI start next week.")
    assert pages[1] == ("Congratulations!\nSend photos.", "I will.")  # Ana twice in a row: one input
    assert all(ui and reply for ui, reply in pages)  # no one-sided page
    texts = [t for p in pages for side in p for t in side.split("\n")]
    assert sorted(texts) == sorted(all_texts(conversation())[:-1])  # all once but Ana's last, no prefix
    assert all(not t.startswith(("Ana:", "Bo:")) for t in texts)
    assert stats["input"]["lost"] == {NO_REPLY: 1} and stats["input"]["kept"] == 11  # unanswered "z"
    context = result.context  # type: ignore[attr-defined]
    assert "Ana: My cat Miso turned two.\nBo: Happy birthday to Miso!" in context
    assert "Characteristics of Ana" in context and "Ana: Ana:" not in context


def test_memoryos_speaker_a_opens_pages_when_speaker_b_speaks_first(memoryos_stub: object,
                                                                   tmp_path: Path) -> None:
    from baselines.memoryos.protocol import NO_OPENER

    mos, result, _, stats = run_memoryos(b_first(), tmp_path)
    pages = [(p["user_input"], p["agent_response"]) for p in mos.added]  # type: ignore[attr-defined]
    # Bo's opening turn could only make a page without an input, which memoryos-pro drops: never sent
    assert pages == [("Congratulations!", "I start on Monday."), ("How is Lisbon?", "Sunny.")]
    assert stats["input"] == {"given": 5, "kept": 4, "unit": "pages", "stored": 2,
                              "lost": {NO_OPENER: 1}, "upstream": True}
    context = result.context  # type: ignore[attr-defined]
    assert "Ana: Congratulations!\nBo: I start on Monday." in context
    assert "Characteristics of Ana:" in context and "Characteristics of Bo" not in context
    assert "The Ana is a cat owner." in context  # the profile's "user" is speaker_a
    assert "- Bo recommended a vet (t)" in context  # the assistant knowledge's "I" is speaker_b


def test_memoryos_eval_script_settings(memoryos_stub: object, tmp_path: Path) -> None:
    from baselines.memoryos.protocol import EVAL_SCRIPT_SETTINGS
    from benchmarks.harness.app import compose_config

    mos, _, _, _ = run_memoryos(chat(), tmp_path / "paper")
    assert mos.retriever.calls[0]["top_k_knowledge"] == 10  # type: ignore[attr-defined]
    paper = compose_config(["method=memoryos"]).method.system
    system = compose_config(["method=memoryos_eval"]).method.system
    assert {k for k in system if system[k] != paper.get(k)} == {"short_term_capacity"}  # the queue alone
    assert system.short_term_capacity == 1 and EVAL_SCRIPT_SETTINGS == {"short_term_capacity": 1}
    mos, _, _, _ = run_memoryos(chat(), tmp_path / "eval", **EVAL_SCRIPT_SETTINGS)
    assert mos.settings["short_term_capacity"] == 1  # type: ignore[attr-defined]
    assert mos.retriever.calls[0]["top_k_knowledge"] == 10  # type: ignore[attr-defined]


# ---------------------------------------------------------------- MemPalace raw mode (in process)


@pytest.fixture
def mempalace_stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    with stub_packages(monkeypatch, "mempalace_raw", ("chromadb", "mempalace")):
        import chromadb

        yield chromadb


def run_mempalace(sessions: list[Session], tmp_path: Path, **settings: object) -> tuple[object, object]:
    from baselines.mempalace import MemPalaceSystem

    system = MemPalaceSystem(endpoints(), query_prefix=PREFIX, **settings)  # type: ignore[arg-type]
    system.reset("i", tmp_path)
    collection = system.collection
    system.ingest(sessions)
    result = system.retrieve("What is my cat's name?", None)
    system.close()
    return collection, result


def test_mempalace_ranks_user_documents_and_answers_from_whole_sessions(mempalace_stub: object,
                                                                        tmp_path: Path) -> None:
    collection, result = run_mempalace(chat(), tmp_path)
    indexed = [row[1] for row in collection.rows]  # type: ignore[attr-defined]
    assert (indexed
            == ["I adopted a grey cat called Miso.\nShe needs a vet.", "I moved to Lisbon for a new job."])
    assert collection.queries == [{"texts": [PREFIX + "What is my cat's name?"], "n_results": 2}]  # type: ignore[attr-defined]
    assert result.trace["top_k"] == 5 and result.evidence[0].session_ids == ["s1"]  # type: ignore[attr-defined]
    # The answer model reads both speakers, each turn once with its speaker once.
    assert "assistant: Miso is a lovely name." in result.context  # type: ignore[attr-defined]
    assert result.evidence[0].text.count("Try the clinic on Main Street.") == 1  # type: ignore[attr-defined]
    assert result.evidence[0].turn_ids == ["s1:0", "s1:1", "s1:2", "s1:3"]  # type: ignore[attr-defined]
    _, indexed_only = run_mempalace(chat(), tmp_path / "b", answer_documents="indexed")
    assert "Miso is a lovely name." not in indexed_only.context  # type: ignore[attr-defined]


def test_mempalace_locomo_documents_name_each_speaker_once(mempalace_stub: object, tmp_path: Path) -> None:
    """LoCoMo documents as upstream's locomo_bench.py writes them: `Name said, "text"` per turn."""
    collection, result = run_mempalace(conversation(), tmp_path)
    assert (collection.rows[0][1]  # type: ignore[attr-defined]
            == 'Ana said, "My cat Miso turned two."\nBo said, "Happy birthday to Miso!"')
    assert "Ana: My cat Miso turned two.\nBo: Happy birthday to Miso!" in result.context  # type: ignore[attr-defined]
    assert result.trace["top_k"] == 10  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="answer_documents"):
        run_mempalace(chat(), tmp_path / "c", answer_documents="user")


# ---------------------------------------------------------------- LightMem (worker, stub checkout)


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def record_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "record.jsonl"
    monkeypatch.setenv("UPSTREAM_STUB_RECORD", str(path))
    return path


def run_worker(system: object, sessions: list[Session], workdir: Path) -> tuple[dict, object]:
    try:
        system.reset("instance-1", workdir)  # type: ignore[attr-defined]
        stats = system.ingest(sessions)  # type: ignore[attr-defined]
        result = system.retrieve("Where did I move?", datetime(2023, 5, 1))  # type: ignore[attr-defined]
    finally:
        system.close()  # type: ignore[attr-defined]
    return stats, result


def lightmem(checkout: Path, tmp_path: Path, **settings: object) -> object:
    from baselines.lightmem import lightmem_system

    return lightmem_system(endpoints(), python=sys.executable, checkout=str(checkout),
                           llmlingua_model_path="/m/llmlingua2", query_prefix=PREFIX,
                           log_path=tmp_path / "worker.log", **settings)  # type: ignore[arg-type]


def test_lightmem_runs_the_paper_config_on_the_shared_endpoint(record_file: Path, tmp_path: Path) -> None:
    stats, result = run_worker(lightmem(UPSTREAM / "lightmem", tmp_path), chat(), tmp_path / "w")
    events = records(record_file)
    config = next(e["config"] for e in events if e["event"] == "from_config")
    assert config["index_strategy"] == "embedding" and config["retrieve_strategy"] == "embedding"
    assert config["extract_threshold"] == 0.1 and config["topic_segment"] and config["pre_compress"]
    assert config["messages_use"] == "user_only" and config["update"] == "offline"
    assert config["text_embedder"] == {"model_name": "openai", "configs": {
        "model": "embedder", "api_key": "local", "embedding_dims": 2,
        "openai_base_url": endpoints().base_url}}
    assert config["memory_manager"]["configs"]["openai_base_url"] == endpoints().base_url
    assert config["embedding_retriever"]["configs"]["path"] == str((tmp_path / "w" / "qdrant").resolve())
    adds = [e for e in events if e["event"] == "add_memory"]
    assert [[m["role"] for m in a["messages"]] for a in adds] == [["user", "assistant"]] * 4
    assert [m["content"] for a in adds for m in a["messages"] if m["content"]] == all_texts(chat())
    assert [a["force_extract"] for a in adds] == [False, False, False, True] and adds[0]["prompt"] is None
    assert adds[0]["messages"][0]["time_stamp"] == "2023-03-01T09:00:00"
    # run_lightmem_qwen.py answers with no offline update; the option runs offline_update.py's 0.8 merge
    assert not any(e["event"] in ("construct_update_queue", "offline_update") for e in events)
    assert stats["offline_update"] is False
    assert next(e for e in events if e["event"] == "search")["limit"] == 20 and stats["limit"] == 20
    assert next(e for e in events if e["event"] == "embed")["text"] == PREFIX + "Where did I move?"
    assert stats["pinned_commit"].startswith("8fc9a91") and "checkout_commit" in stats
    assert result.context.splitlines()[0] == "2023-03-01T09:00:00 Mon I adopted a grey cat called Miso."  # type: ignore[attr-defined]


def test_lightmem_offline_update_on_longmemeval_is_an_option(record_file: Path, tmp_path: Path) -> None:
    from baselines.lightmem.system import OFFLINE_UPDATE
    from benchmarks.harness.app import compose_config

    assert compose_config(["method=lightmem"]).method.system.offline_update == OFFLINE_UPDATE
    stats, _ = run_worker(lightmem(UPSTREAM / "lightmem", tmp_path, offline_update={"chat": True}), chat(),
                          tmp_path / "w")
    events = records(record_file)
    assert [e["event"] for e in events[-4:-2]] == ["construct_update_queue", "offline_update"]
    assert events[-3]["score_threshold"] == 0.8 and stats["offline_update"] is True  # offline_update.py's
    with pytest.raises(ValueError, match="per dataset shape"):
        lightmem(UPSTREAM / "lightmem", tmp_path, offline_update={"longmemeval": True})


def test_lightmem_locomo_turns_carry_their_speakers(record_file: Path, tmp_path: Path) -> None:
    stats, result = run_worker(lightmem(UPSTREAM / "lightmem", tmp_path), conversation(), tmp_path / "w")
    events = records(record_file)
    adds = [e for e in events if e["event"] == "add_memory"]
    assert len(adds) == 12 and all(a["prompt"] == "stub LoCoMo extraction prompt" for a in adds)
    first, reply = adds[0]["messages"]
    assert first == {"role": "user", "content": "My cat Miso turned two.", "speaker_id": "speaker_a",
                     "speaker_name": "Ana", "time_stamp": "2023-05-08T13:56:00"}
    assert reply["role"] == "assistant" and reply["content"] == "" and reply["speaker_name"] == "Ana"
    assert adds[1]["messages"][0]["speaker_id"] == "speaker_b"
    assert (next(e for e in events if e["event"] == "search")["limit"] == 60
            and stats["shape"] == "conversation")
    assert next(e for e in events if e["event"] == "offline_update")["score_threshold"] == 0.9
    # Grouped by speaker, the speaker of the best-ranked memory first (search_locomo.py).
    context = result.context  # type: ignore[attr-defined]
    assert context.startswith("Memories for user Ana:\n\n[Memory recorded on: 08 May 2023, Mon]\n"
                              "My cat Miso turned two.\n\n")
    ana, bo = context.split("\n\nMemories for user Bo:\n\n")
    assert "Happy birthday to Miso!" in bo and "Happy birthday" not in ana and "Congratulations!" in ana


def test_lightmem_speaker_ids_follow_the_speaker_order(record_file: Path, tmp_path: Path) -> None:
    stats, result = run_worker(lightmem(UPSTREAM / "lightmem", tmp_path), b_first(), tmp_path / "w")
    adds = [e for e in records(record_file) if e["event"] == "add_memory"]
    ids = [(a["messages"][0]["speaker_name"], a["messages"][0]["speaker_id"]) for a in adds]
    assert ids[:2] == [("Bo", "speaker_b"), ("Ana", "speaker_a")] and stats["speakers"] == ["Ana", "Bo"]
    assert result.context.startswith("Memories for user Bo:")  # type: ignore[attr-defined]


def test_lightmem_refuses_another_layout(record_file: Path, tmp_path: Path) -> None:
    from baselines.lightmem import lightmem_system

    with pytest.raises(SystemUnavailable, match=r"no LightMem checkout"):
        lightmem_system(endpoints())
    with pytest.raises(SystemUnavailable,
                       match=r"layout of github zjunlp/LightMem@8fc9a9179f91 .*missing src/lightmem"):
        lightmem_system(endpoints(), python=sys.executable, checkout=str(tmp_path))
    with pytest.raises(SystemUnavailable, match="llmlingua_model_path"):
        lightmem_system(endpoints(), python=sys.executable, checkout=str(UPSTREAM / "lightmem"))
    older = tmp_path / "older"
    shutil.copytree(UPSTREAM / "lightmem", older)
    module = older / "src" / "lightmem" / "memory" / "lightmem.py"
    module.write_text(module.read_text().replace("force_segment=False, ", ""))
    with pytest.raises(SystemUnavailable, match=r"not the layout the worker supports .*add_memory has no "
                                                r"parameter force_segment"):
        lightmem(older, tmp_path)


# ---------------------------------------------------------------- EverMemOS (worker, stub checkout)


def evermemos(checkout: Path, tmp_path: Path, **settings: object) -> object:
    from baselines.evermemos import evermemos_system

    return evermemos_system(endpoints(), python=sys.executable, checkout=str(checkout), query_prefix=PREFIX,
                            log_path=tmp_path / "worker.log", **settings)  # type: ignore[arg-type]


def test_evermemos_messages_carry_staggered_times_and_current_fields(record_file: Path,
                                                                     tmp_path: Path) -> None:
    system = evermemos(UPSTREAM / "evermemos", tmp_path, reranker_base_url="http://127.0.0.1:7/v1/rerank")
    assert system.info["private_models"] == {"rerank": "Qwen/Qwen3-Reranker-4B at http://127.0.0.1:7/v1/rerank"}  # type: ignore[attr-defined]
    stats, result = run_worker(system, conversation(), tmp_path / "w")
    events = records(record_file)
    added = next(e for e in events if e["event"] == "add")
    messages = added["messages"]
    assert [m["content"] for m in messages] == all_texts(conversation())
    assert messages[0]["sender_name"] == "Ana" and messages[0]["sender_id"] == "ana_conv_0"
    assert added["metadata"] == {"speaker_a": "Ana", "speaker_b": "Bo"}
    times = [datetime.fromisoformat(m["timestamp"]) for m in messages]
    assert times[1] - times[0] == (datetime(2023, 5, 8, 13, 56, 30) - datetime(2023, 5, 8, 13, 56))
    second = times[2:]  # the last session: 30 s steps
    assert all((b - a).total_seconds() == 30 for a, b in zip(second, second[1:]))
    assert times[1] < times[2]  # 30 s fits in the first session's four minutes
    init = next(e for e in events if e["event"] == "init")["llm"]
    assert (init["base_url"] == endpoints().base_url and init["model"] == "backbone"
            and init["max_tokens"] == 2048)
    embeds = [e for e in events if e["event"] == "embed"]
    assert (embeds
            == [{"event": "embed", "text": PREFIX + "Where did I move?", "base_url": endpoints().base_url,
                 "model": "embedder"}])
    assert stats["private_calls"] == {"rerank": 0} and result.trace["rerank_calls"] == 1  # type: ignore[attr-defined]
    assert next(e for e in events if e["event"] == "search")["response_top_k"] == 10  # upstream's
    assert result.context.startswith("Episodes memories for conversation between Ana and Bo")  # type: ignore[attr-defined]


def test_evermemos_metadata_follows_the_speaker_order(record_file: Path, tmp_path: Path) -> None:
    run_worker(evermemos(UPSTREAM / "evermemos", tmp_path, use_reranker=False), b_first(), tmp_path / "w")
    added = next(e for e in records(record_file) if e["event"] == "add")
    assert added["messages"][0]["sender_name"] == "Bo"
    assert added["metadata"] == {"speaker_a": "Ana", "speaker_b": "Bo"}


def test_evermemos_cuts_longmemeval_messages_at_8000_characters(record_file: Path, tmp_path: Path) -> None:
    long = Session("s3", datetime(2023, 5, 2, 9), (Turn("user", "x" * 9000, None, "s3:0"),
                                                    Turn("assistant", "y" * 8000, None, "s3:1")))
    stats, _ = run_worker(evermemos(UPSTREAM / "evermemos", tmp_path, use_reranker=False),
                          [*chat(), long], tmp_path / "w")
    sent = [m["content"] for m in next(e for e in records(record_file) if e["event"] == "add")["messages"]]
    assert sent[-2:] == ["x" * 8000, "y" * 8000] and stats["messages_cut"] == 1
    assert sent[:-2] == all_texts(chat())


def test_evermemos_stagger_shrinks_to_the_next_session() -> None:
    spec = importlib.util.spec_from_file_location("evermemos_worker",
                                                  Path("baselines/evermemos/worker.py").resolve())
    assert spec is not None and spec.loader is not None
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    sessions = [{"timestamp": "2023-05-08T13:56:00", "turns": [{}] * 11},
                {"timestamp": "2023-05-08T14:00:00", "turns": [{}]}]
    first, second = worker.staggered(sessions)
    # 30 s would overrun the gap
    assert (first[1] - first[0]).total_seconds() == pytest.approx(0.9 * 240 / 10)
    assert first[-1] < datetime(2023, 5, 8, 14, 0) and second == [datetime(2023, 5, 8, 14, 0)]


def test_evermemos_chat_senders_and_reranker_off(record_file: Path, tmp_path: Path) -> None:
    stats, _ = run_worker(evermemos(UPSTREAM / "evermemos", tmp_path, use_reranker=False, response_top_k=4),
                          chat(), tmp_path / "w")
    events = records(record_file)
    names = [m["sender_name"] for m in next(e for e in events if e["event"] == "add")["messages"]]
    assert names[:2] == ["user_instance-1", "assistant_instance-1"]  # upstream's LongMemEval converter naming
    search = next(e for e in events if e["event"] == "search")
    assert search["use_reranker"] is False and search["response_top_k"] == 4
    assert stats["private_models"] == {}


def test_evermemos_refuses_the_old_layout_and_a_missing_reranker(tmp_path: Path) -> None:
    from baselines.evermemos import evermemos_system

    old = tmp_path / "old"
    (old / "evaluation" / "src" / "adapters").mkdir(parents=True)
    (old / "evaluation" / "src" / "adapters" / "evermemos_adapter.py").write_text("")
    with pytest.raises(SystemUnavailable,
                       match=r"layout of github EverMind-AI/EverMemOS@e37205f5077a .*methods/EverCore"):
        evermemos_system(endpoints(), python=sys.executable, checkout=str(old))
    with pytest.raises(SystemUnavailable, match="reranker_base_url"):
        evermemos_system(endpoints(), python=sys.executable, checkout=str(UPSTREAM / "evermemos"))


def test_checkout_commit_reads_head_without_git(tmp_path: Path) -> None:
    git = tmp_path / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    assert checkout_commit(tmp_path) is None
    (git / "packed-refs").write_text("# pack-refs\n" + "a" * 40 + " refs/heads/main\n")
    assert checkout_commit(tmp_path) == "a" * 40
    (git / "refs" / "heads" / "main").write_text("b" * 40 + "\n")
    assert checkout_commit(tmp_path) == "b" * 40
    (git / "HEAD").write_text("c" * 40)
    assert checkout_commit(tmp_path) == "c" * 40


# ---------------------------------------------------------------- the speaker order, loader to adapters


def worker_module(system: str) -> object:
    spec = importlib.util.spec_from_file_location(f"{system}_worker",
                                                  Path(f"baselines/{system}/worker.py").resolve())
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_locomo_speaker_order_reaches_each_adapter(tmp_path: Path) -> None:
    """The tiny LoCoMo file with speaker_a and speaker_b swapped: speaker_b (Nadia) speaks first. The
    loader's order, not the first turn, decides speaker_a in MemoryOS, LightMem and EverMemOS."""
    from baselines.memoryos.protocol import parties
    from baselines.worker import session_payload
    from benchmarks.datasets import load_dataset

    samples = json.loads((UPSTREAM.parent / "locomo_tiny.json").read_text())
    conv = samples[0]["conversation"]
    conv.update(speaker_a=conv["speaker_b"], speaker_b=conv["speaker_a"])
    (tmp_path / "locomo.json").write_text(json.dumps(samples))
    sessions = list(load_dataset("locomo", path=tmp_path / "locomo.json", limit=1).instances[0].sessions)
    assert sessions[0].turns[0].speaker == "Nadia"
    who = parties(sessions)
    assert (who.first, who.first_label, who.second_label) == ("Tomas", "Tomas", "Nadia")
    payloads = [session_payload(s) for s in sessions]
    assert all(p["speakers"] == ["Tomas", "Nadia"] for p in payloads)
    pairs = worker_module("lightmem").conversation_pairs(payloads[0], [])  # type: ignore[attr-defined]
    assert [(p[0]["speaker_name"], p[0]["speaker_id"]) for p in pairs[:2]] == [
        ("Nadia", "speaker_b"), ("Tomas", "speaker_a")]
    _, speakers = worker_module("evermemos").messages(payloads, "conv", dict)  # type: ignore[attr-defined]
    assert speakers[:2] == ["Tomas", "Nadia"]

