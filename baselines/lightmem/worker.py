"""LightMem worker: runs inside the user's LightMem environment (github zjunlp/LightMem, which pins
torch 2.8 and so cannot share this project's environment) and answers the protocol of
baselines/worker.py. Standard library only at import time; kept small so it is easy to audit.

hello options (built by baselines/lightmem/system.py): `configs` (LightMem's paper configuration per
dataset shape, "chat" and "conversation"), `limits` (memories retrieved per shape), `offline_update`
(whether the build ends with the offline update, per shape; one boolean for both from older adapters),
`update_thresholds` (the offline update's merge score per shape),
`query_prefix` (prepended to the question before LightMem's text embedder sees it), `locomo_prompts`
(the checkout's `experiments/locomo/prompts.py`, whose LoCoMo extraction prompt upstream passes on
LoCoMo), `upstream` (pin and checkout commit, echoed into build statistics).

Ingest follows upstream's scripts. User/assistant chats (LongMemEval): each user turn and the assistant
reply after it are one `add_memory` call, with the session time as `time_stamp`. Two-person conversations
(LoCoMo): each turn is a user message carrying `speaker_id` (speaker_a/speaker_b, as the session's
`speakers` order them; the first to speak is speaker_a only when a session names none) and
`speaker_name`, followed by an empty assistant message. Upstream skips a turn its pairing cannot place;
here such a turn is paired with an empty other side. The last call forces segmentation and extraction.
Where `offline_update` asks for it (by default on LoCoMo only, as upstream's scripts: add_locomo.py
merges at 0.9; the LongMemEval QA script adds and retrieves with no update, its `offline_update.py` at
0.8 being a separate utility), the update (queues, then merges above the shape's score) ends the build.

The build statistics' `input` says what reached LightMem's store: a non-empty turn is kept when it goes
to `add_memory` in a role that `messages_use` reads ("user_only", upstream's: the user messages, so on
LongMemEval the assistant turns are lost as upstream loses them; on LoCoMo every turn is a user
message); `stored` counts the entries in its Qdrant collection after the build.

Retrieval embeds the question once and searches LightMem's Qdrant index for the shape's limit; the
context is upstream's rendering: "time weekday memory" lines (LongMemEval); on LoCoMo, the memories
grouped by their `speaker_name`, speakers in order of their best-ranked memory, each group of
"[Memory recorded on: date, weekday]" blocks under "Memories for user <name>:" (search_locomo.py's
answer prompt). Each memory is an evidence item with its search `rank`, listed in the context's order
(its speaker as `section`), and the retrieval sends the `layout` that writes the context from them.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import inspect
from datetime import datetime
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location("worker_protocol",
                                               Path(__file__).resolve().parents[1] / "worker.py")
assert _spec is not None and _spec.loader is not None
protocol = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(protocol)

REQUIRED = {"add_memory": ("messages", "METADATA_GENERATE_PROMPT", "force_segment", "force_extract"),
            "retrieve": ("query", "limit"), "construct_update_queue_all_entries": (),
            "offline_update_all_entries": ("score_threshold",)}


def layout_problems(factory: Any) -> list[str]:
    """What the LightMemory class lacks of the API this worker drives (empty when it is the pinned one)."""
    problems = []
    for method, params in REQUIRED.items():
        found = getattr(factory, method, None)
        if found is None:
            problems.append(f"LightMemory.{method} is missing")
            continue
        missing = [p for p in params if p not in inspect.signature(found).parameters]
        if missing:
            problems.append(f"LightMemory.{method} has no parameter {', '.join(missing)}")
    return problems


def shape_of(sessions: list) -> str:
    return "conversation" if any(t.get("speaker") for s in sessions for t in s["turns"]) else "chat"


def chat_pairs(session: dict) -> list[list[dict]]:
    """User turn + following assistant reply; a turn with no partner gets an empty other side."""
    pairs: list[list[dict]] = []
    for turn in (t for t in session["turns"] if t["content"].strip()):
        role = "assistant" if turn["role"] == "assistant" else "user"
        message = {"role": role, "content": turn["content"], "time_stamp": session["timestamp"]}
        if role == "assistant" and pairs and pairs[-1][1]["content"] == "" and pairs[-1][0]["content"]:
            pairs[-1][1] = message
        elif role == "assistant":
            pairs.append([{"role": "user", "content": "", "time_stamp": session["timestamp"]}, message])
        else:
            pairs.append([message, {"role": "assistant", "content": "", "time_stamp": session["timestamp"]}])
    return pairs


def conversation_pairs(session: dict, speakers: list[str]) -> list[list[dict]]:
    """add_locomo.py: every turn a user message with its speaker, then an empty assistant message.
    `speakers` starts as the conversation's (speaker_a first); a speaker it lacks is added when met."""
    pairs = []
    for name in session.get("speakers") or []:
        if name not in speakers:
            speakers.append(name)
    for turn in (t for t in session["turns"] if t["content"].strip()):
        name = turn.get("speaker") or turn["role"]
        if name not in speakers:
            speakers.append(name)
        side = {"speaker_id": "speaker_a" if name == speakers[0] else "speaker_b", "speaker_name": name,
                "time_stamp": session["timestamp"]}
        pairs.append([{"role": "user", "content": turn["content"], **side},
                      {"role": "assistant", "content": "", **side}])
    return pairs


def render(shape: str, payload: dict) -> str:
    stamp, weekday, memory = (payload.get("time_stamp", ""), payload.get("weekday", ""),
                              payload.get("memory", ""))
    if shape == "chat":
        return f"{stamp} {weekday} {memory}"
    with contextlib.suppress(ValueError):
        stamp = datetime.fromisoformat(stamp.replace("Z", "+00:00")).strftime("%d %B %Y")
    return f"[Memory recorded on: {stamp}, {weekday}]\n{memory}"


# The answer contexts upstream writes (baselines/worker.py LAYOUT): "time weekday memory" lines
# (run_lightmem_qwen.py); memories grouped by speaker, each group under its name (search_locomo.py).
LAYOUTS = {"chat": {"item": "{text}", "join": "\n"},
           "conversation": {"section": "Memories for user {section}:\n\n", "item": "{text}",
                            "join": "\n\n", "sections_join": "\n\n"}}
USER_ONLY = "user_only"
READ_ROLES = {"user_only": ("user",), "assistant_only": ("assistant",), "hybrid": ("user", "assistant")}


def by_speaker(evidence: list) -> list:
    """search_locomo.py's order: the memories grouped by the speaker they were extracted for (their
    `section`), the speaker of the best-ranked memory first, each group in rank order."""
    groups: dict[str, list] = {}
    for item in evidence:
        groups.setdefault(item["section"], []).append(item)
    return [item for group in groups.values() for item in group]


def input_account(sessions: list, shape: str, messages_use: str, stored: int | None) -> dict:
    """What of the turns sent reached LightMem's store (baselines.base.InputKept's fields): the
    non-empty turns sent in a role that `messages_use` reads (LoCoMo turns are all user messages)."""
    given = sum(len(s["turns"]) for s in sessions)
    turns = [t for s in sessions for t in s["turns"] if t["content"].strip()]
    roles = READ_ROLES.get(messages_use, ("user", "assistant"))
    unread = [t for t in turns if shape == "chat" and
              ("assistant" if t["role"] == "assistant" else "user") not in roles]
    lost = {reason: n for reason, n in (
        ("empty turns", given - len(turns)),
        (f"turns in a role LightMem's messages_use {messages_use!r} does not read", len(unread))) if n}
    return {"given": given, "kept": len(turns) - len(unread), "unit": "memories", "stored": stored,
            "lost": lost, "upstream": messages_use == USER_ONLY and given == len(turns)}


def stored_entries(memory: Any) -> int | None:
    """The entries in LightMem's Qdrant collection, counted as add_locomo.py counts them."""
    try:
        return len(memory.embedding_retriever.get_all(with_vectors=False, with_payload=False))
    except Exception:  # a retriever without get_all: the count is unknown, not zero
        return None


class LightMemWorker:
    def __init__(self) -> None:
        self.options: dict = {}
        self.memory: Any = None
        self.shape = "chat"

    def hello(self, options: dict) -> dict:
        from lightmem.memory.lightmem import LightMemory  # fails here when the environment is not LightMem's

        problems = layout_problems(LightMemory)
        if problems:
            pin = options.get("upstream", {}).get("pinned_commit", "the pinned commit")
            raise RuntimeError(f"this LightMem is not the layout the worker supports ({pin}): "
                               f"{'; '.join(problems)}")
        self.options, self.factory = options, LightMemory
        return {"name": "lightmem", "module": LightMemory.__module__, **options.get("upstream", {})}

    def reset(self, instance_id: str, workdir: str) -> dict:
        self.instance_id, self.workdir, self.memory = instance_id, Path(workdir), None
        return {}

    def _open(self, shape: str) -> None:
        config = copy.deepcopy(self.options["configs"][shape])
        config["embedding_retriever"]["configs"].update(collection_name=self.instance_id[:60] or "lightmem",
                                                        path=str(self.workdir / "qdrant"))
        self.shape, self.memory = shape, self.factory.from_config(config)

    def _prompt(self) -> Any:
        if self.shape != "conversation":
            return None
        spec = importlib.util.spec_from_file_location("lightmem_locomo_prompts",
                                                      self.options["locomo_prompts"])
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.METADATA_GENERATE_PROMPT_locomo

    def ingest(self, sessions: list) -> dict:
        self._open(shape_of(sessions))
        prompt = self._prompt()
        speakers: list[str] = []
        calls = [p for s in sessions for p in (conversation_pairs(s, speakers) if self.shape == "conversation"
                                               else chat_pairs(s))]
        for index, messages in enumerate(calls):
            last = index == len(calls) - 1
            self.memory.add_memory(messages=messages, METADATA_GENERATE_PROMPT=prompt, force_segment=last,
                                   force_extract=last)
        update = self._updates()
        if update:
            self.memory.construct_update_queue_all_entries()
            self.memory.offline_update_all_entries(
                score_threshold=float(self.options["update_thresholds"][self.shape]))
        messages_use = self.options["configs"][self.shape].get("messages_use", USER_ONLY)
        return {"adds": len(calls), "shape": self.shape, "limit": self.options["limits"][self.shape],
                "speakers": speakers, "offline_update": update,
                "input": input_account(sessions, self.shape, messages_use, stored_entries(self.memory)),
                **self.options.get("upstream", {})}

    def _updates(self) -> bool:
        """Whether this shape's build ends with the offline update (`offline_update`: per shape, or one
        boolean for both)."""
        update = self.options.get("offline_update", True)
        return bool(update.get(self.shape, False) if isinstance(update, dict) else update)

    def retrieve(self, question: str, when: str | None) -> dict:
        vector = self.memory.text_embedder.embed(self.options.get("query_prefix", "") + question)
        found = self.memory.embedding_retriever.search(query_vector=vector,
                                                       limit=int(self.options["limits"][self.shape]),
                                                       return_full=True)
        evidence = [{"text": render(self.shape, r.get("payload", {})),
                     "time": r.get("payload", {}).get("time_stamp"), "score": r.get("score"), "rank": rank,
                     "section": (r.get("payload", {}).get("speaker_name") or "Unknown"
                                 if self.shape == "conversation" else None)}
                    for rank, r in enumerate(found)]
        if self.shape == "conversation":
            evidence = by_speaker(evidence)
        return {"evidence": evidence, "layout": LAYOUTS[self.shape]}

    def close(self) -> dict:
        self.memory = None
        return {}


if __name__ == "__main__":
    protocol.serve(LightMemWorker())
