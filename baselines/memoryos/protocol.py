"""How MemoryOS's own evaluation (github BAI-LAB/MemoryOS, `eval/main_loco_parse.py`) turns a dialogue
into QA pages and a retrieval into the context its answer model reads; pure functions, no library.

Pages, the authors' pairing (`process_conversation`): over the whole history in time order, a turn of
the first party (LongMemEval's user, LoCoMo's `speaker_a`, as `Session.speakers` names them, who need not
speak first) opens a page as `user_input`, and each turn of the other party is the `agent_response` of
the last page, across a session boundary too (a page is dated by the session of its first turn). Where
upstream overwrites a page's reply with a second consecutive one, the replies are joined; an opening
turn that follows an unanswered one in the same session joins its input. The texts carry no speaker
prefix: the context names the two parties once, per page. No page is one-sided: memoryos-pro's updater
(and the authors' `bulk_evict_and_update_mid_term`) drops a page without an input or a response, so the
turns that only such a page could hold are counted lost, by reason, and never sent: a reply before any
opening turn, an opening turn that no reply follows before the next opening turn of a later session (or
the end), and turns with no text.

Context: upstream's memory sections in upstream's order (retrieved pages with their time and `meta_info`,
the "conversation chain overview"; the user profile and knowledge with "user" and "assistant" replaced by
the two names; the assistant knowledge with "I" replaced by the second name), without upstream's
role-play instructions and the question, which the harness's shared answer prompt supplies. Every part
of it is an evidence item with its section (`render_items` lays them out under the fixed headers).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from baselines.base import EvidenceItem, Session, Turn

# The settings of the MemoryOS paper (short-term queue 7, top-m segments 5, top-k pages 10, top-10 user
# knowledge entries; the authors' script's knowledge search also returns 10) and the retrieval thresholds
# of its `eval/` code (0.1 each); heat threshold 5 and topic similarity 0.6 likewise.
SHORT_TERM, TOP_M_SEGMENTS, TOP_K_PAGES, TOP_K_KNOWLEDGE = 7, 5, 10, 10
PAPER_SETTINGS: dict[str, float] = {"short_term_capacity": SHORT_TERM, "top_k_sessions": TOP_M_SEGMENTS,
                                    "retrieval_queue_capacity": TOP_K_PAGES,
                                    "top_k_knowledge": TOP_K_KNOWLEDGE, "segment_threshold": 0.1,
                                    "page_threshold": 0.1, "knowledge_threshold": 0.1, "heat_threshold": 5.0,
                                    "similarity_threshold": 0.6}
# What the authors' LoCoMo script (`eval/main_loco_parse.py`) sets apart from the paper: a short-term
# queue of 1 (`configs/method/memoryos_eval.yaml`).
EVAL_SCRIPT_SETTINGS: dict[str, float] = {"short_term_capacity": 1}

# Why a turn given to MemoryOS is not in its mid-term memory after the build.
NO_OPENER = "a reply before any opening turn (a one-sided page, which memoryos-pro's updater drops)"
NO_REPLY = "an opening turn with no reply (a one-sided page, which memoryos-pro's updater drops)"
EMPTY = "no text (a one-sided page, which memoryos-pro's updater drops)"
MISSING = "sent in a page, but not in mid-term memory after the build"
UPSTREAM_REASONS = frozenset({NO_OPENER, NO_REPLY, EMPTY})

# The sections of MemoryOS's context, each item's `EvidenceItem.section`, in the order the context lays
# them out; ranks go profile first (the standing summary every MemoryOS prompt carries), then the
# retriever's lists as it returns them (pages, user knowledge), then the assistant knowledge.
PAGES, PROFILE = "pages", "profile"
USER_KNOWLEDGE, ASSISTANT_KNOWLEDGE = "user_knowledge", "assistant_knowledge"
RANKING = (PROFILE, PAGES, USER_KNOWLEDGE, ASSISTANT_KNOWLEDGE)


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
    """One QA page: its two sides, the turns it holds, their sessions, and its time (its first turn's
    session)."""

    time: datetime
    user_input: str = ""
    agent_response: str = ""
    turn_ids: list[str] = field(default_factory=list)
    session_ids: list[str] = field(default_factory=list)

    def add(self, side: str, text: str, turn: Turn, session_id: str) -> None:
        before = getattr(self, side)
        setattr(self, side, f"{before}\n{text}" if before else text)
        self.turn_ids.append(turn.turn_id)
        if session_id not in self.session_ids:
            self.session_ids.append(session_id)


@dataclass
class Pairing:
    """The two-sided pages to send, and the turns no two-sided page holds (turn ids by reason)."""

    given: int
    pages: list[Page]
    lost: dict[str, list[str]]


def pair_pages(sessions: Sequence[Session], who: Parties) -> Pairing:
    """The authors' pairing over the whole history, replies joined instead of overwritten (module doc)."""
    pages: list[Page] = []
    lost: dict[str, list[str]] = {}
    given = 0
    for session in sorted(sessions, key=lambda s: s.timestamp):
        for turn in session.turns:
            given += 1
            text = turn.content.strip()
            last = pages[-1] if pages else None
            if not text:
                lost.setdefault(EMPTY, []).append(turn.turn_id)
            elif who.opens(turn):
                if last is None or last.agent_response or last.session_ids[0] != session.session_id:
                    last = Page(session.timestamp)
                    pages.append(last)
                last.add("user_input", text, turn, session.session_id)
            elif last is None:
                lost.setdefault(NO_OPENER, []).append(turn.turn_id)
            else:
                last.add("agent_response", text, turn, session.session_id)
    for page in pages:
        if not page.agent_response:
            lost.setdefault(NO_REPLY, []).extend(page.turn_ids)
    return Pairing(given, [p for p in pages if p.agent_response], lost)


def _named(text: str, who: Parties) -> str:
    """Upstream's names in the profile and user knowledge: "user" is speaker_a, "assistant" speaker_b."""
    if not who.by_speaker:
        return text
    text = re.sub(r"(?i)\buser\b", who.first_label, text)
    return re.sub(r"(?i)\bassistant\b", who.second_label, text)


def _first_person(text: str, who: Parties) -> str:
    """Upstream's name in the assistant knowledge: "I" is speaker_b."""
    return re.sub(r"\bI\b", who.second_label, text) if who.by_speaker else text


def page_text(who: Parties, page: dict) -> str:
    """A retrieved page as the context shows it, without its fixed header."""
    return (f"{who.first_label}: {page.get('user_input', '')}\n{who.second_label}: "
            f"{page.get('agent_response', '')}\nTime:({page.get('timestamp', '')})\n"
            f"Conversation chain overview:({page.get('meta_info') or ''})")


def evidence_items(who: Parties, pages: Sequence[EvidenceItem], profile: str | None,
                   user_knowledge: Sequence[dict], assistant_knowledge: Sequence[dict]) -> list[EvidenceItem]:
    """Every part of the context as an item, in the context's order, with its section and its rank.
    `pages`: the retrieved pages' items (text from `page_text`), in the retriever's order."""
    items = [EvidenceItem(p.text, p.time, p.session_ids, p.turn_ids, p.score, PAGES) for p in pages]
    if profile:
        items.append(EvidenceItem(_named(profile, who), section=PROFILE))
    items += [EvidenceItem(_named(k["knowledge"], who), k.get("timestamp"), section=USER_KNOWLEDGE)
              for k in user_knowledge]
    items += [EvidenceItem(_first_person(k["knowledge"], who), k.get("timestamp"),
                           section=ASSISTANT_KNOWLEDGE) for k in assistant_knowledge]
    order = sorted(range(len(items)), key=lambda i: (RANKING.index(items[i].section or PAGES), i))
    for rank, i in enumerate(order):
        items[i].rank = rank
    return items


def render_items(who: Parties, items: Sequence[EvidenceItem]) -> str:
    """MemoryOS's context for `items` (any subset of `evidence_items`, in their order), section by
    section under its fixed headers; a section with no item keeps its header ("None" for the profile)."""
    def of(section: str) -> list[EvidenceItem]:
        return [e for e in items if (e.section or PAGES) == section]

    history = "\n".join(f"【Historical Memory】 {e.text}\n" for e in of(PAGES))
    profile = "\n".join(e.text for e in of(PROFILE)) or "None"
    background = (f"{_named('【User Profile】', who)}\n{profile}\n\n"
                  + "".join(f"{e.text}\n" for e in of(USER_KNOWLEDGE)))
    assistant = "【Assistant Knowledge】\n" + "".join(f"- {e.text} ({e.time or ''})\n"
                                                     for e in of(ASSISTANT_KNOWLEDGE))
    return (f"Relevant past conversations:\n{history}\n\nCharacteristics of {who.first_label}:\n"
            f"{background}\n{assistant}")
