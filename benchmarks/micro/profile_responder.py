"""A scripted extractor with the proportions of a real user's memory, for the store-size benchmarks.

The rule responder extracts the synthetic text's stock sentences, so at 10^4 sessions a memory holds a
few thousand facts, some said in thousands of sessions, and three entity trees. A LongMemEval-S
instance built by the paper's system holds ~1,435 canonical facts in ~249 trees for ~50 sessions
(REFERENCE.md). This responder answers extraction with 2-5 facts per 2-turn cell, deterministic in the
cell's text:

- ~70 % are new facts, lexically varied (a person, an action, an object, a place, a detail);
- ~30 % restate a fact of the user's profile (a pool of 3,000, Zipf-distributed), so facts recur
  across sessions and some become hot;
- facts name people drawn Zipf-wise from a pool of 800, so frequent people get entity trees;
- each fact belongs to one of 200 ongoing threads (Zipf), whose phrase it repeats and whose domain
  it carries, so facts cluster into scenes as a real embedder clusters them (the hashing embedder
  sees only shared words);
- 60 % of facts are the user's own, the rest the assistant's.

Every other prompt goes to the rule responder. Bench use only, selected explicitly."""

from __future__ import annotations

import bisect
import itertools
import random
import re
import zlib
from typing import Any

from memforest.llm.base import ChatRequest
from memforest.llm.testing import rule_responder

_FIRST = ("Maya", "Liam", "Noor", "Owen", "Priya", "Mateo", "Hana", "Felix", "Zara", "Tomas", "Ines", "Kofi",
          "Lena", "Arjun", "Sofia", "Ravi", "Elena", "Marco", "Yuki", "Omar", "Clara", "Diego", "Amara",
          "Jonas", "Leila", "Nikhil", "Greta", "Samir", "Rosa", "Emil", "Tariq", "Anya", "Bruno", "Chloe",
          "Dario", "Esme", "Farid", "Gwen", "Hugo", "Isla")
_LAST = ("Okafor", "Lindqvist", "Moreau", "Tanaka", "Haddad", "Novak", "Ferreira", "Kowalski", "Brennan",
         "Castillo", "Ivanova", "Mensah", "Rossi", "Sato", "Weber", "Quinn", "Duarte", "Abara", "Keller",
         "Farah")
_VERBS = ("booked", "bought", "repaired", "recommended", "borrowed", "painted", "cancelled", "planned",
          "visited", "ordered", "returned", "cooked", "finished", "started", "practised", "sold", "rented",
          "organised", "photographed", "learned", "joined", "left", "renewed", "installed", "adopted",
          "baked", "upgraded", "shipped", "watched", "wrote")
_OBJECTS = ("a vintage road bike", "the pottery class", "a flight to Lisbon", "the kitchen faucet",
            "a sourdough starter", "the quarterly report", "a pair of hiking boots", "the piano lessons",
            "a used hatchback", "the garden shed", "a telescope", "the book club", "a standing desk",
            "the apartment lease", "a rescue greyhound", "the wedding playlist", "a camping stove",
            "the tax return", "a language course", "the birthday cake", "a noise-cancelling headset",
            "the climbing gym pass", "a ceramic vase", "the team offsite", "a mechanical keyboard",
            "the chess tournament", "a sewing machine", "the volunteer shift", "a kayak",
            "the photography portfolio", "a herb planter", "the marathon training plan", "a film camera",
            "the dentist appointment", "a gaming laptop", "the family reunion", "an espresso machine",
            "the conference talk", "a bookshelf", "the insurance claim")
_PLACES = ("in Denver", "near the harbour", "at the community centre", "in Kyoto", "downtown",
           "at the lake house", "in the old town", "at work", "in Montreal", "at the farmers market",
           "in the suburbs", "online", "at the university", "in Porto", "at the airport", "in the mountains",
           "at the library", "in Nairobi", "at the studio", "in Melbourne")
_DETAILS = ("for {n} dollars", "after {n} weeks of waiting", "with {n} friends", "for the {n}th time",
            "{n} days before the trip", "in under {n} hours", "with a {n} percent discount", "for {n} people")
_TOPICS = ("travel", "home", "fitness", "cooking", "work", "music", "finance", "pets", "hobbies", "health",
           "family", "learning", "shopping", "events", "technology")
_QUALIFIERS = ("spring renovation", "weekend getaway", "savings challenge", "training block", "side project",
               "family visit", "holiday season", "career move", "health routine", "neighbourhood festival",
               "reading list", "moving plans", "anniversary surprise", "volunteering stint", "night course")
_THREADS = 200
_PROFILE = 3000
_PEOPLE = 800
_RESTATED = 0.3
_USER_SHARE = 0.6


def _zipf_cdf(n: int, s: float) -> list[float]:
    weights = list(itertools.accumulate(1.0 / (i + 1) ** s for i in range(n)))
    return [w / weights[-1] for w in weights]


class ProfileResponder:
    """Extraction with realistic proportions (module docstring); deterministic in each cell's text."""

    def __init__(self, seed: int = 0) -> None:
        rng = random.Random(seed)
        self.people = [f"{a} {b}" for a, b in itertools.product(_FIRST, _LAST)]
        rng.shuffle(self.people)
        self.people = self.people[:_PEOPLE]
        self._people_cdf = _zipf_cdf(_PEOPLE, 1.0)
        self._profile_cdf = _zipf_cdf(_PROFILE, 1.0)
        self._thread_cdf = _zipf_cdf(_THREADS, 0.8)
        self.threads = [(f"{rng.choice(_OBJECTS)} {rng.choice(_PLACES)} during the "
                         f"{rng.choice(_QUALIFIERS)}, part of the {rng.choice(_QUALIFIERS)} "
                         f"{rng.choice(_TOPICS)} review", rng.choice(_TOPICS))
                        for _ in range(_THREADS)]
        self.profile = [self._fact(rng, origin="user") for _ in range(_PROFILE)]

    def __call__(self, request: ChatRequest) -> str | dict[str, Any] | Exception:
        if request.prompt_id != "extract_facts":
            return rule_responder(request)
        text = request.messages[-1]["content"]
        body = text.split("Dialogue:\n", 1)[-1].split("\n\nReturn", 1)[0]
        rng = random.Random(zlib.crc32(body.encode()))
        facts = []
        for _ in range(rng.randint(2, 5)):
            if rng.random() < _RESTATED:
                facts.append(self.profile[bisect.bisect_left(self._profile_cdf, rng.random())])
            else:
                facts.append(self._fact(rng, "user" if rng.random() < _USER_SHARE else "assistant"))
        return {"facts": facts}

    def _person(self, rng: random.Random) -> str:
        return self.people[min(_PEOPLE - 1, bisect.bisect_left(self._people_cdf, rng.random()))]

    def _fact(self, rng: random.Random, origin: str) -> dict[str, Any]:
        person = self._person(rng)
        other = self._person(rng) if rng.random() < 0.3 else ""
        phrase, domain = self.threads[min(_THREADS - 1, bisect.bisect_left(self._thread_cdf, rng.random()))]
        detail = " " + rng.choice(_DETAILS).format(n=rng.randint(2, 90)) if rng.random() < 0.5 else ""
        subject = "The user" if origin == "user" else "The assistant suggested that the user"
        with_other = f" with {other}" if other else ""
        text = f"{subject} and {person} {rng.choice(_VERBS)} the {phrase}{with_other}{detail}."
        words = sorted({w.lower() for w in re.findall(r"[A-Za-z]{5,}", phrase)}, key=len, reverse=True)
        return {"text": text, "origin": origin, "role": "event" if rng.random() < 0.5 else "state",
                "participants": [origin], "entities": [e for e in (person, other) if e],
                "topics": [domain, *words[:1]], "time_text": "", "event_start": "", "event_end": "",
                "attribute": "", "domain": domain, "collection": ""}
