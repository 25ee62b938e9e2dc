"""Invented facts to plant in synthetic conversations, each with a question that asks for it in other
words (as benchmark questions do: "What shade did we choose for the lounge?" for "a paint colour
called Sea Glass for the living room walls").

A fact kind belongs to a topic, so the haystack's other sessions on that topic are near misses."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class FactKind:
    topic: str
    statement: str  # first person, with {slots}
    question: str  # the user asking about it later
    about: str  # a third-person question for two-speaker conversations ({who})
    answer: str  # the slot holding the answer
    slots: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _v(text: str) -> tuple[str, ...]:
    return tuple(text.split(", "))


NAMES = _v("Biscuit, Maple, Pepper, Juniper, Clover, Mochi, Hazel, Tofu, Bramble, Nutmeg, Sorrel, Pippin")
PEOPLE = _v("Marta, Olivier, Priya, Tomasz, Ines, Declan, Yuki, Farah, Lukas, Noor, Callum, Esme")
CITIES = _v("Lisbon, Porto, Kraków, Ljubljana, Valencia, Bergen, Tallinn, Ghent, Bologna, "
            "Seville, Zadar, Lyon")

FACTS: tuple[FactKind, ...] = (
    FactKind("pets", "Oh, and we finally brought home a {breed} from the rescue centre; the kids decided "
                     "to call her {pet}.",
             "What name did we give the dog we adopted?", "What is the name of {who}'s rescue dog?", "pet",
             {"breed": _v("whippet, beagle, corgi, greyhound, spaniel, terrier mix"), "pet": NAMES}),
    FactKind("travel",
             "For the {city} trip I ended up booking a room at the {hotel}, close to the old harbour.",
             "Which place am I staying at when I visit {city}?", "Where is {who} staying in {city}?", "hotel",
             {"city": CITIES,
              "hotel": _v("Casa Azul, Hotel Miramar, Pension Lotte, Villa Serena, The Anchor "
                          "Inn, Hostel Lumen")}),
    FactKind("fitness", "I ran the {race} on Sunday and crossed the line in {time}, a personal best!",
             "What was my finishing time at the {race}?", "How fast did {who} complete the {race}?", "time",
             {"race": _v("Riverside 10K, Harbour Half, City Night Run, Forest Trail 15K"),
              "time": _v("48 minutes, 52 minutes, 1:51, 1:58, 1:24, 56 minutes")}),
    FactKind("cooking",
             "My aunt finally shared her {dish} recipe, and the trick is a spoonful of {ingredient}.",
             "What's the secret ingredient in my aunt's {dish}?", "What does {who}'s aunt put in her {dish}?",
             "ingredient", {"dish": _v("chilli, lasagne, curry, goulash, fish pie, ratatouille"),
                            "ingredient": _v("miso paste, smoked paprika, anchovy, brown sugar, cocoa "
                                             "powder, fish sauce")}),
    FactKind("career", "Big news: I accepted the {role} position at {company}, I start in a few weeks.",
             "Where am I going to be working after the job switch?", "Which company hired {who}?", "company",
             {"role": _v("product analyst, data engineer, project coordinator, UX designer"),
              "company": _v("Northwind Labs, Brightwell, Kestrel Systems, Orchard Health, Tidewater Media")}),
    FactKind("music", "I've started {instrument} lessons on Thursday evenings with a teacher named {person}.",
             "Who is my {instrument} instructor?", "Who teaches {who} to play the {instrument}?", "person",
             {"instrument": _v("cello, piano, violin, saxophone, drum"), "person": PEOPLE}),
    FactKind("finance", "I finally cleared my car loan; it had been {amount} every month for four years.",
             "How much were my monthly car payments?", "How much did {who} pay each month for the car?",
             "amount", {"amount": _v("$289, $342, $415, $198, $376")}),
    FactKind("home", "We went with a paint colour called {paint} for the living room walls.",
             "What shade did we choose for the lounge?", "Which colour did {who} paint the living room?",
             "paint",
             {"paint": _v("Sea Glass, Oat Milk, Dusky Heather, Moss Green, Pale Saffron, Harbour Grey")}),
    FactKind("books", "On the train home I finished {book}, the new one by {author}.",
             "Who wrote the book I finished during my commute?",
             "Who is the author of the book {who} read on the train?",
             "author", {"book": _v("The Salt Orchard, Night Ferry, A House of Lanterns, The Quiet Atlas"),
                        "author": _v("Helen Marsh, Tobias Crane, Ada Wren, Samuel Okafor, Lena Ivers")}),
    FactKind("photography", "I picked up a second-hand {camera} for {amount}, it was barely used.",
             "Which camera model did I buy used?", "What camera did {who} buy second-hand?", "camera",
             {"camera": _v("Fujifilm X-T3, Sony A6400, Nikon Z50, Canon R8, Olympus E-M10"),
              "amount": _v("$450, $520, $610, $380")}),
    FactKind("health", "The allergist confirmed I'm allergic to {allergen}, so I'm reading every label now.",
             "What did my allergy test show I react to?", "What is {who} allergic to?", "allergen",
             {"allergen": _v("sesame, hazelnuts, shellfish, kiwi, mustard, celery")}),
    FactKind("cars", "I always take the car to {garage} for its service, they are honest and quick.",
             "Which mechanic do I use for my vehicle?", "Where does {who} get the car serviced?", "garage",
             {"garage": _v("Dale's Autos, Mill Lane Motors, QuickFix Garage, Hartley & "
                           "Sons, Ridgeway Auto")}),
    FactKind("family",
             "My cousin {person} is getting married in {city} next spring, and I'm one of the witnesses.",
             "Where is my cousin's wedding going to take place?",
             "In which city is {who}'s cousin getting married?", "city", {"person": PEOPLE, "city": CITIES}),
    FactKind("books", "I volunteer at the {venue} every {weekday} morning, mostly sorting donations.",
             "On which day of the week do I do my volunteering?", "Which day does {who} volunteer?",
             "weekday",
             {"venue": _v("community library, charity bookshop, food bank, animal shelter"),
              "weekday": _v("Monday, Tuesday, Wednesday, Thursday, Friday, Saturday")}),
    FactKind("gardening", "The {plant} I planted along the fence finally flowered, they are a deep {colour}.",
             "What colour did the flowers by the fence turn out?", "What colour are {who}'s new flowers?",
             "colour",
             {"plant": _v("dahlias, foxgloves, irises, sweet peas, hollyhocks"),
              "colour": _v("purple, crimson, apricot, ivory, magenta")}),
    FactKind("fitness", "I joined a {sport} club that trains at the sports centre on {weekday} nights.",
             "What evening does my club meet?", "On which night does {who}'s club train?", "weekday",
             {"sport": _v("badminton, climbing, water polo, volleyball, fencing"),
              "weekday": _v("Monday, Tuesday, Wednesday, Thursday")}),
)

# Facts that repeat across sessions: (topic, statement, counting question, dated question, a
# third-person question listing them, items).
COUNTED: tuple[tuple[str, str, str, str, str, tuple[str, ...]], ...] = (
    ("gardening", "Picked up a {item} at the garden centre today for the balcony.",
     "How many plants have I bought for the balcony so far?", "Which plant did I get for the balcony {ago}?",
     "Which plants has {who} bought for the balcony?",
     _v("lavender pot, small olive tree, fern, geranium, rosemary bush")),
    ("music", "I went to see {item} play live last night, the crowd was brilliant.",
     "How many gigs have I been to recently?", "Which band did I see in concert {ago}?",
     "Which bands has {who} seen live?",
     _v("The Lanterns, Velvet Coast, Nora Quinn, The Tidelines, Orbit Club")),
    ("books", "Just finished reading {item}, couldn't put it down.",
     "How many books have I finished lately?", "What was the novel I finished {ago}?",
     "Which books has {who} finished recently?",
     _v("The Paper Harbour, Winter Orchard, Glass Rivers, The Long Field")),
    ("photography", "Bought a {item} for the camera this week.",
     "How many camera accessories have I picked up?", "What did I buy for my camera {ago}?",
     "What camera gear has {who} bought?", _v("new tripod, polarising filter, spare battery, 50mm lens")),
)
# ... and values that change (knowledge updates): (topic, old statement, new statement, question, values).
UPDATED: tuple[tuple[str, str, str, str, tuple[str, ...]], ...] = (
    ("career", "My commute is about {value} minutes each way on the bus.",
     "Since we moved house my commute has changed, it's now {value} minutes door to door.",
     "How long does it take me to get to work these days?", _v("25, 35, 40, 50, 55, 70")),
    ("fitness", "My best deadlift so far is {value} kilos.",
     "New personal record on the deadlift today: {value} kilos!",
     "What's the heaviest I've lifted on the deadlift?", _v("80, 90, 95, 105, 110, 120")),
    ("finance", "Our rent is {value} a month at the moment.",
     "The landlord put the rent up, we now pay {value} a month.", "How much is our monthly rent now?",
     _v("$1,150, $1,240, $1,300, $1,420, $1,510")),
    ("pets", "The cat weighs {value} kilos according to the vet.",
     "At the last check-up the vet said the cat is now {value} kilos.", "What does my cat weigh?",
     _v("3.8, 4.1, 4.6, 5.2, 5.5")),
)
# Events with a date (temporal questions): (topic, statement, what it is called in a question).
EVENTS: tuple[tuple[str, str, str], ...] = (
    ("health", "I had my wisdom tooth taken out this morning, my face is still numb.",
     "have my wisdom tooth removed"),
    ("cooking", "Today I went to a fresh pasta workshop at the cooking school.",
     "attend the pasta-making workshop"),
    ("family", "We threw a surprise party for my dad's sixtieth this afternoon.",
     "throw my father's surprise party"),
    ("home", "Today we finally replaced the old boiler.", "get the boiler replaced"),
    ("travel", "Just renewed my passport at the post office.", "renew my passport"),
    ("cars", "Passed my driving test today on the second attempt!", "pass my driving test"),
)
# Preferences stated in passing, the request they should shape, and a third-person inference question.
PREFERENCES: tuple[tuple[str, str, str, str], ...] = (
    ("cooking", "I've been vegetarian for years and I love anything with a lot of chilli.",
     "Can you suggest something I could make for dinner tonight?", "Would {who} enjoy a steak dinner?"),
    ("travel", "I always prefer small family-run guesthouses over big hotel chains.",
     "Any recommendations on where to stay for my next holiday?",
     "What kind of accommodation would {who} book?"),
    ("fitness", "I find treadmills boring, I only really enjoy running on trails.",
     "What kind of workout should I do this weekend?", "Would {who} rather run in a gym or outdoors?"),
    ("books", "I mostly read historical fiction, especially anything set at sea.",
     "What should I read next?", "What genre of book would make a good gift for {who}?"),
    ("music", "I'm really into jazz piano at the moment, Bill Evans especially.",
     "Can you recommend some music to listen to while I work?", "What music would {who} likely put on?"),
)
# Lists the assistant gave, asked about later: (topic, category, items).
LISTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("travel", "day trips from the city",
     _v("the Salt Marsh boardwalk, Castle Rennick, the Ferryman's Caves, Orla Falls, the "
        "Tin Quarter market")),
    ("books", "mystery novels",
     _v("The Ninth Lock, Ashes at Calder House, A Murder in Brine, The Glass Witness, Fog over Penmarrow")),
    ("fitness", "stretching routines",
     _v("the Sunrise Flow, the Desk Reset, the Hip Opener Ladder, the Ten-Minute Unwind, the "
        "Runner's Recovery")),
    ("cooking", "one-pot recipes",
     _v("Tuscan bean stew, lemon orzo with peas, chickpea and spinach curry, smoky sausage jambalaya, miso "
        "mushroom risotto")),
    ("music", "podcasts about songwriting",
     _v("Chord & Verse, The Bridge Section, Demo Tapes, Hooks and Lines, The Rhyme Room")),
)
ORDINALS = ("first", "second", "third", "fourth", "fifth")


def fill(rng: random.Random, kind: FactKind) -> dict[str, str]:
    return {slot: rng.choice(values) for slot, values in kind.slots.items()}
