"""How MemoryOS's own evaluation (github BAI-LAB/MemoryOS, `eval/main_loco_parse.py`) turns a dialogue
into QA pages and a retrieval into the context its answer model reads; pure functions, no library.

Pages: the first party (LongMemEval's user, LoCoMo's `speaker_a`, as `Session.speakers` names them, who
need not speak first) opens a page as `user_input`; the other party's next turn is its `agent_response`.
The texts carry no speaker prefix: the context names the two parties once, per page. Upstream pairs
across session boundaries and lets a second consecutive reply overwrite the first; here a page stays
within its session and a reply with no open page gets a page of its own, so that no turn is lost.

Context: upstream's memory sections in upstream's order (user profile and knowledge with "user" and
"assistant" replaced by the two names, assistant knowledge, then each retrieved page with its time and
its `meta_info`, the "conversation chain overview"), without upstream's role-play instructions and the
question, which the harness's shared answer prompt supplies.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from baselines.base import Session, Turn

# The settings of the MemoryOS paper (short-term queue 7, top-m segments 5, top-k pages 10), knowledge
# top-k 20 (memoryos-pro's retriever default) and the retrieval thresholds of its `eval/` code (0.1 each);
# heat threshold 5 and topic similarity 0.6 likewise.
SHORT_TERM, TOP_M_SEGMENTS, TOP_K_PAGES, TOP_K_KNOWLEDGE = 7, 5, 10, 20
PAPER_SETTINGS: dict[str, float] = {"short_term_capacity": SHORT_TERM, "top_k_sessions": TOP_M_SEGMENTS,
                                    "retrieval_queue_capacity": TOP_K_PAGES,
                                    "top_k_knowledge": TOP_K_KNOWLEDGE, "segment_threshold": 0.1,
                                    "page_threshold": 0.1, "knowledge_threshold": 0.1, "heat_threshold": 5.0,
                                    "similarity_threshold": 0.6}
# What the authors' LoCoMo script (`eval/main_loco_parse.py` with `retrieval_and_answer.py`) sets apart
# from the paper: a short-term queue of 1 and knowledge top-k 10 (`configs/method/memoryos_eval.yaml`).
EVAL_SCRIPT_SETTINGS: dict[str, float] = {"short_term_capacity": 1, "top_k_knowledge": 10}


@dataclass(frozen=True)
class Parties:
    """The two sides of a dialogue: who opens a page and who answers, with the names the context uses."""

    first: str  # LongMemEval: role "user"; LoCoMo: speaker_a's name
    second_label: str
    first_label: str
    by_speaker: bool

    def opens(self, turn: Turn) -> bool:
        return (turn.speaker == self.first) if self.by_speaker else turn.role == "user"


def parties(sessions: Sequence[Session]) -> Parties:
    """Named speakers (LoCoMo): speaker_a and speaker_b in the order `Session.speakers` gives, else the
    first to speak as speaker_a. Roles for user/assistant data."""
    names = list(next((s.speakers for s in sessions if s.speakers), ()))
    for session in sorted(sessions, key=lambda s: s.timestamp):
        for turn in session.turns:
            if turn.speaker and turn.speaker not in names:
                names.append(turn.speaker)
    if names:
        return Parties(names[0], names[1] if len(names) > 1 else "Other", names[0], True)
    return Parties("user", "Assistant", "User", False)


@dataclass
class Page:
    user_input: str = ""
    agent_response: str = ""
    turn_ids: list[str] = field(default_factory=list)


def pages_of(session: Session, who: Parties) -> list[Page]:
    """The session's QA pages, paired by speaker: an opening turn starts a page, the next reply closes it."""
    pages: list[Page] = []
    open_page: Page | None = None
    for turn in session.turns:
        text = turn.content.strip()
        if not text:
            continue
        if who.opens(turn):
            open_page = Page(user_input=text, turn_ids=[turn.turn_id])
            pages.append(open_page)
        elif open_page is not None:
            open_page.agent_response = text
            open_page.turn_ids.append(turn.turn_id)
            open_page = None
        else:
            pages.append(Page(agent_response=text, turn_ids=[turn.turn_id]))
    return pages


def _named(text: str, who: Parties) -> str:
    if not who.by_speaker:
        return text
    text = re.sub(r"(?i)\buser\b", who.first_label, text)
    return re.sub(r"(?i)\bassistant\b", who.second_label, text)


def render_context(who: Parties, profile: str | None, user_knowledge: Iterable[Mapping],
                   assistant_knowledge: Iterable[Mapping], pages: Iterable[Mapping]) -> str:
    """The memory part of MemoryOS's evaluation prompt, section by section."""
    background = (f"【User Profile】\n{profile or 'None'}\n\n"
                  + "".join(f"{k['knowledge']}\n" for k in user_knowledge))
    assistant = "【Assistant Knowledge】\n" + "".join(
        f"- {k['knowledge']} ({k.get('timestamp', '')})\n" for k in assistant_knowledge)
    history = "\n".join(
        f"【Historical Memory】 {who.first_label}: {p.get('user_input', '')}\n{who.second_label}: "
        f"{p.get('agent_response', '')}\nTime:({p.get('timestamp', '')})\n"
        f"Conversation chain overview:({p.get('meta_info') or ''})\n" for p in pages)
    return (f"Relevant past conversations:\n{history}\n\nCharacteristics of {who.first_label}:\n"
            f"{_named(background, who)}\n{assistant}")
