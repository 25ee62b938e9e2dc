"""Invented chat text on everyday topics, for synthetic benchmark files that behave like real chat.

Each topic has its own nouns, activities, places and feelings; sentences come from templates shared by
all topics, so two sessions on one topic share vocabulary (the near misses a retriever must pass over)
while sessions on different topics do not. User turns are a few sentences; assistant turns are long
advice with numbered lists, as in LongMemEval, where an assistant turn often outruns a 256-token
encoder."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Topic:
    name: str
    nouns: tuple[str, ...]
    activities: tuple[str, ...]
    places: tuple[str, ...]


def _t(name: str, nouns: str, activities: str, places: str) -> Topic:
    return Topic(name, tuple(nouns.split(", ")), tuple(activities.split(", ")), tuple(places.split(", ")))


TOPICS: tuple[Topic, ...] = (
    _t("cooking",
       "sourdough starter, cast iron pan, spice rack, slow cooker, stock, marinade, knife set, pantry, "
       "lentil soup, pasta dough",
       "meal prepping for the week, baking bread, trying new recipes, cooking for guests, making fresh "
       "pasta, roasting vegetables", "kitchen, farmers market, grocery store, cooking class"),
    _t("travel",
       "itinerary, carry-on bag, passport, rail pass, travel insurance, window seat, hostel, guidebook, "
       "layover, rental car", "planning a trip, booking flights, packing light, exploring old towns, "
       "finding cheap accommodation, renting a car abroad",
       "airport, train station, coastal town, mountain village"),
    _t("fitness",
       "running shoes, resistance bands, kettlebell, heart rate monitor, foam roller, protein shake, "
       "training plan, yoga mat, rowing machine, gym membership",
       "training for a half marathon, lifting weights, stretching after workouts, doing interval runs, "
       "swimming laps, cycling to work", "gym, park, pool, track"),
    _t("pets", "leash, litter box, chew toy, vet appointment, dog food, cat tree, flea treatment, crate, "
       "grooming brush, pet insurance", "house-training a puppy, walking the dog, brushing the cat, "
       "teaching new tricks, finding a pet sitter", "dog park, vet clinic, pet shop, animal shelter"),
    _t("gardening", "tomato plants, compost bin, raised bed, seedlings, pruning shears, mulch, watering can, "
       "herb garden, potting soil, greenhouse", "planting bulbs, pruning roses, starting seeds indoors, "
       "composting kitchen scraps, keeping slugs away", "back garden, allotment, balcony, garden centre"),
    _t("finance", "budget spreadsheet, savings account, credit card, index fund, emergency fund, tax return, "
       "mortgage, pension, monthly bills, student loan", "saving for a deposit, tracking expenses, "
       "paying down debt, investing for retirement, cutting subscriptions",
       "bank, accountant's office, home office"),
    _t("music", "acoustic guitar, keyboard, metronome, sheet music, headphones, vinyl records, amplifier, "
       "concert tickets, playlist, ukulele", "practising scales, learning songs by ear, going to concerts, "
       "recording covers, joining a choir", "music school, concert hall, record shop, rehearsal room"),
    _t("home",
       "leaky tap, paint samples, power drill, bookshelf, curtains, radiator, floorboards, smoke alarm, "
       "storage boxes, rug", "repainting the hallway, fixing squeaky doors, decluttering the garage, "
       "putting up shelves, insulating the loft", "hardware store, living room, garage, attic"),
    _t("career", "resume, cover letter, performance review, promotion, job interview, LinkedIn profile, "
       "manager, deadline, salary negotiation, team meeting", "preparing for interviews, asking for a raise, "
       "switching careers, networking at events, managing a team", "office, coworking space, conference"),
    _t("photography", "mirrorless camera, tripod, prime lens, memory card, editing software, lighting kit, "
       "camera bag, filters, photo album, drone", "shooting landscapes, editing photos, taking portraits, "
       "learning manual mode, printing photos", "photo studio, camera shop, nature reserve, city centre"),
    _t("books", "novel, book club, library card, e-reader, reading list, audiobook, bookmark, short stories, "
       "biography, poetry collection", "reading before bed, joining a book club, listening to audiobooks, "
       "writing reviews, finishing a series", "library, bookshop, reading nook, café"),
    _t("cars", "oil change, winter tyres, dashboard light, car wash, insurance renewal, brake pads, "
       "parking permit, roof rack, fuel economy, car seat", "servicing the car, learning to drive, "
       "planning a road trip, buying a used car, cleaning the interior",
       "garage, motorway, car park, dealership"),
    _t("health", "sleep schedule, vitamins, dentist appointment, allergies, headache, physiotherapy, "
       "water bottle, posture, blood pressure, eye test", "sleeping better, cutting down on caffeine, "
       "managing stress, recovering from an injury, eating more vegetables",
       "clinic, pharmacy, hospital, spa"),
    _t("family", "birthday party, school run, grandparents, family dinner, board games, holiday plans, "
       "homework, wedding anniversary, photo frame, family recipe",
       "planning a birthday, visiting relatives, organising a reunion, helping with homework, "
       "hosting a dinner", "grandma's house, school, park, restaurant"),
)
TOPIC_NAMES = tuple(t.name for t in TOPICS)
_BY_NAME = {t.name: t for t in TOPICS}

_USER = (
    "I've been thinking about {noun} a lot lately, mostly because of {activity}.",
    "Do you have any tips for {activity}? I always end up overthinking it.",
    "Last weekend I spent most of Saturday at the {place}, which was nice but tiring.",
    "My partner says I should stop worrying about the {noun} and just get on with it.",
    "Honestly I'm not sure whether the {noun} is worth it, what do you think?",
    "I tried {activity} again this week and it went better than I expected.",
    "Can you explain how people usually deal with the {noun} when they are short on time?",
    "A friend recommended a {place} nearby, but I haven't had the chance to go yet.",
    "I want to get more organised about {activity} before the summer.",
    "The {noun} I have is getting old, so I might replace it soon.",
    "Is it normal to feel a bit lost when you start {activity}?",
    "I keep a little notebook for {activity}, though I forget to use it.",
    "We talked about the {noun} at dinner and everyone had a different opinion.",
    "I'd love a simple plan, nothing too complicated, just something I can stick to.",
    "Thanks, that helps. One more thing about the {noun} though.",
)
_ASSISTANT_OPEN = (
    "That's a great question, and a lot of people run into the same thing with {activity}.",
    "Happy to help! Here is a practical way to think about the {noun}.",
    "It sounds like you're making good progress with {activity}.",
    "There are a few things worth considering before you decide on the {noun}.",
)
_ASSISTANT_ITEM = (
    "**{Noun}**: start small and check it once a week, because consistency matters more than intensity.",
    "**Plan ahead**: set aside time for {activity} on the same day each week so it becomes a habit.",
    "**Ask locally**: staff at the {place} usually know what works well for beginners.",
    "**Keep notes**: write down what you tried with the {noun} and what you would change next time.",
    "**Budget**: decide in advance how much you want to spend on the {noun} and stick to it.",
    "**Rest**: don't push too hard; {activity} is easier to enjoy when you are not exhausted.",
    "**Compare options**: look at two or three alternatives to the {noun} before you commit.",
    "**Get feedback**: share what you are doing with a friend who has experience with {activity}.",
    "**Check the basics**: make sure the {noun} is set up correctly before troubleshooting anything else.",
    "**Be patient**: most people need a few weeks before {activity} feels natural.",
)
_ASSISTANT_CLOSE = (
    "Let me know how it goes, and feel free to ask if you want more detail on any of these points.",
    "If you tell me a bit more about your situation, I can tailor these suggestions further.",
    "Overall, the key is to keep it simple and adjust as you learn what works for you.",
)


def topic(name: str) -> Topic:
    return _BY_NAME[name]


def _fill(rng: random.Random, template: str, top: Topic) -> str:
    noun = rng.choice(top.nouns)
    return template.format(noun=noun, Noun=noun.capitalize(), activity=rng.choice(top.activities),
                           place=rng.choice(top.places))


def user_text(rng: random.Random, top: Topic, chars: int) -> str:
    """Sentences of one user turn on `top`, about `chars` characters."""
    parts: list[str] = []
    while sum(len(p) + 1 for p in parts) < chars:
        parts.append(_fill(rng, rng.choice(_USER), top))
    return " ".join(parts)


def assistant_text(rng: random.Random, top: Topic, chars: int) -> str:
    """A long advice turn: an opening, a numbered list of tips, a closing; about `chars` characters."""
    lines = [_fill(rng, rng.choice(_ASSISTANT_OPEN), top)]
    items = rng.sample(_ASSISTANT_ITEM, len(_ASSISTANT_ITEM))
    n = 0
    while sum(len(line) + 1 for line in lines) < chars - 120:
        n += 1
        lines.append(f"{n}. " + _fill(rng, items[(n - 1) % len(items)], top))
    lines.append(rng.choice(_ASSISTANT_CLOSE))
    return "\n".join(lines)


def chat_line(rng: random.Random, top: Topic) -> str:
    """One short line of a conversation between friends (LoCoMo style)."""
    return _fill(rng, rng.choice(_USER), top)


def insert_sentence(rng: random.Random, text: str, sentence: str) -> str:
    """`sentence` placed between two sentences of `text`, at a random point."""
    cuts = [i + 2 for i in range(len(text) - 2) if text[i] in ".?!" and text[i + 1] == " "]
    at = rng.choice([0, *cuts, len(text)])
    return (text[:at] + sentence + " " + text[at:]).strip() if at < len(text) else f"{text} {sentence}"
