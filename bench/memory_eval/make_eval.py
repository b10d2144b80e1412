# ruff: noqa: E501 (the generator is mostly data: one fact or question template a line)
"""Generate the memory recall evaluation: a year of one fictional user's chats, with annotated questions.

    uv run python bench/memory_eval/make_eval.py      # writes bench/memory_eval/eval.json (deterministic)

The user (time zone Europe/Berlin) talks to the assistant on about 150 days of 2025 and early January 2026.
What a real history has and a small fact list lacks:
- distinct facts in one category: a sister, a brother, a mother, a father, a cousin, a partner, two children,
  each with a city, a job, a hobby; the user's own three jobs and two homes over the year; a dozen trips;
- the same people and places coming back in small talk and in the assistant's replies (distractors);
- dated events ("ran my first half marathon today") whose date is only the turn's date.
Questions, each with the ids of the turns that answer it (`evidence`):
- paraphrase: the fact asked in other words ("Which city is my older sister based in?");
- keyword: a few words as a person types into a search box ("Anna Porto flat");
- when: when something happened ("When did I run the half marathon?"): the answer is the turn's date;
- range: what happened in a period ("What did I do last June?", "in March 2025", "yesterday"), evidence =
  every event of the user in that period;
- two: needs two memories ("What does my sister's husband do for a living?").
`now` is the moment the questions are asked; relative dates in questions count from it, in the user's zone.
Every question has a `split` (tune / test) drawn from a seeded hash, so weights are chosen on one half and
reported on the other.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

SEED = 11
TZ = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 1, 12, 10, 0, tzinfo=TZ)
OUT = Path(__file__).resolve().parent / "eval.json"


@dataclass
class Fact:
    """One thing the user says on a day, with the questions it answers."""

    day: date
    says: list[str]  # alternative wordings; one is picked
    paraphrase: list[str] = field(default_factory=list)
    keyword: list[str] = field(default_factory=list)
    when: str | None = None  # "When did I ...?"
    event: bool = True  # something the user did or that happened (counts for range questions)
    reply: str | None = None  # the assistant's answer (stored too: a realistic distractor)
    key: str | None = None  # name for two-memory questions
    tid: str = ""


def d(month: int, day: int, year: int = 2025) -> date:
    return date(year, month, day)


# -- the people -------------------------------------------------------------------------------------------
# (relation, name, synonyms of the relation for paraphrases, city, job, hobby, birthday)
PEOPLE = [
    ("sister", "Anna", ["older sister", "sis"], "Lisbon", "architect", "surfing", d(2, 14)),
    (
        "brother",
        "Tom",
        ["younger brother", "little brother"],
        "Manchester",
        "history teacher",
        "chess",
        d(7, 3),
    ),
    ("mother", "Helen", ["mum", "mom"], "Bristol", "retired nurse", "choir singing", d(11, 22)),
    ("father", "George", ["dad", "old man"], "Bath", "carpenter", "growing tomatoes", d(3, 12)),
    ("cousin", "Lena", ["cousin from Germany"], "Berlin", "software engineer", "bouldering", d(9, 9)),
    ("partner", "Jordan", ["other half", "spouse"], "Leeds", "nurse", "baking bread", d(5, 30)),
    ("daughter", "Mia", ["eldest", "girl"], "Leeds", "year 3 pupil", "piano", d(8, 19)),
    ("son", "Leo", ["youngest", "boy"], "Leeds", "kindergartener", "dinosaurs", d(12, 1)),
]
CITY_SAYS = [
    "My {rel} {name} lives in {city}.",
    "{name}, my {rel}, has been living in {city} for a few years now.",
    "Called my {rel} {name} in {city} tonight, we talked for an hour.",
]
JOB_SAYS = [
    "{name} works as a {job}.",
    "My {rel} {name} is a {job}, has been for ages.",
    "{name} (my {rel}) had a long week at work, being a {job} is tiring.",
]
HOBBY_SAYS = [
    "{name} is really into {hobby} lately.",
    "My {rel} {name} spends every weekend on {hobby}.",
]
BDAY_SAYS = [
    "It's {name}'s birthday today, my {rel} turns another year older.",
    "Today is my {rel} {name}'s birthday, we had cake.",
]


def people_facts(rnd: random.Random) -> list[Fact]:
    facts: list[Fact] = []
    for rel, name, syn, city, job, hobby, bday in PEOPLE:
        alt = rnd.choice(syn)
        fill = {"rel": rel, "name": name, "city": city, "job": job, "hobby": hobby}
        if rel not in ("daughter", "son", "partner"):  # they live with the user
            facts.append(
                Fact(
                    d(rnd.randint(1, 2), rnd.randint(1, 28)),
                    [t.format(**fill) for t in CITY_SAYS],
                    paraphrase=[
                        f"Which city is my {alt} based in?",
                        f"Where does my {rel} live?",
                        f"Where is {name} living?",
                    ],
                    keyword=[f"{name} {city}"],
                    event=False,
                    reply=f"{city} sounds like a lovely place for {name}.",
                    key=f"{rel}-city",
                )
            )
        facts.append(
            Fact(
                d(rnd.randint(1, 4), rnd.randint(1, 28)),
                [t.format(**fill) for t in JOB_SAYS],
                paraphrase=[
                    f"What does my {alt} do for a living?",
                    f"What is {name}'s profession?",
                    f"What kind of work does {name} do?",
                ],
                keyword=[f"{name} job"],
                event=False,
                reply=f"Being a {job} sounds demanding; I hope {name} gets some rest.",
                key=f"{rel}-job",
            )
        )
        facts.append(
            Fact(
                d(rnd.randint(2, 10), rnd.randint(1, 28)),
                [t.format(**fill) for t in HOBBY_SAYS],
                paraphrase=[
                    f"What does my {alt} do in their free time?",
                    f"Which pastime does {name} enjoy?",
                ],
                keyword=[f"{name} {hobby.split()[-1]}", f"{rel} {name} hobby"],
                event=False,
                key=f"{rel}-hobby",
            )
        )
        facts.append(
            Fact(
                bday,
                [t.format(**fill) for t in BDAY_SAYS],
                paraphrase=[f"When is my {alt}'s birthday?"],
                keyword=[f"{name} birthday", f"{rel} birthday"],
                when=f"On which day did we celebrate {name}'s birthday?",
                reply=f"Happy birthday to {name}!",
                key=f"{rel}-birthday",
            )
        )
    return facts


# -- the user's own year ----------------------------------------------------------------------------------
def own_facts() -> list[Fact]:
    F = Fact
    return [
        F(
            d(1, 8),
            ["I work as a data analyst at Brightwave, mostly SQL dashboards."],
            ["Where was I employed at the start of the year?"],
            ["Brightwave analyst"],
            "When did I mention working at Brightwave?",
            False,
            key="job1",
        ),
        F(
            d(4, 17),
            ["Handed in my notice at Brightwave today. Scary but exciting."],
            ["When did I quit my analyst job?"],
            ["notice Brightwave"],
            "When did I resign from Brightwave?",
        ),
        F(
            d(5, 5),
            ["First day as a product manager at Northwind Logistics!"],
            ["What new role did I start in spring?", "Which company hired me as a PM?"],
            ["Northwind product manager"],
            "When did I start at Northwind?",
            key="job2",
        ),
        F(
            d(11, 20),
            ["I got promoted to senior product manager today."],
            ["Did I get a promotion last year?"],
            ["promoted senior"],
            "When was I promoted?",
        ),
        F(
            d(1, 15),
            ["We live in a terraced house in Leeds, near Roundhay Park."],
            ["Which neighbourhood is our home close to?"],
            ["Roundhay house"],
            None,
            False,
            key="home1",
        ),
        F(
            d(7, 26),
            ["Moving day! We signed for a flat in York and the van comes at eight."],
            ["Which town did our family relocate to?"],
            ["flat York moving"],
            "When did we move house?",
            key="home2",
        ),
        F(
            d(1, 22),
            ["Dentist appointment this morning, I need a filling next month."],
            ["Did I need any dental work?"],
            ["dentist filling"],
            "When did I go to the dentist?",
        ),
        F(
            d(2, 6),
            ["Flew to Lisbon to visit Anna, the pasteis de nata are unreal."],
            ["Who did I go to Portugal to see?"],
            ["Lisbon trip pasteis"],
            "When did I visit my sister?",
        ),
        F(
            d(3, 1),
            ["Signed up for a pottery class on Saturday mornings."],
            ["What kind of course did I enrol in for weekends?"],
            ["pottery class"],
            "When did I start pottery?",
        ),
        F(
            d(3, 12),
            ["Took Dad out for lunch at the Italian place in Bath for his birthday."],
            ["Where did we eat for my father's birthday?"],
            ["lunch Bath Italian"],
            None,
        ),
        F(
            d(3, 29),
            ["Mia played her first piano recital today, she was so nervous."],
            ["How did my daughter's first concert go?"],
            ["Mia recital"],
            "When was Mia's recital?",
        ),
        F(
            d(4, 9),
            ["Mum had her knee surgery today, the surgeon says it went well."],
            ["Did my mother have an operation?"],
            ["Helen knee surgery"],
            "When was Mum's operation?",
        ),
        F(
            d(4, 26),
            ["Spent the whole weekend painting the living room sage green."],
            ["What colour did we choose for the lounge walls?"],
            ["living room paint green"],
            "When did I repaint the living room?",
        ),
        F(
            d(5, 17),
            ["Landed in Rome for a long weekend with Jordan, Trastevere is beautiful."],
            ["Where did my partner and I go for a city break in spring?"],
            ["Rome Trastevere"],
            "When were we in Rome?",
        ),
        F(
            d(6, 1),
            ["Leo had an allergic reaction to peanuts at a party, we ended up in A&E."],
            ["What is my youngest allergic to?", "Why did we go to the emergency room?"],
            ["Leo peanut allergy"],
            "When did Leo react to peanuts?",
            key="leo-allergy",
        ),
        F(
            d(6, 8),
            ["Drove up to Edinburgh for the weekend and climbed Arthur's Seat."],
            ["Which Scottish hill did I hike?"],
            ["Edinburgh Arthur's Seat"],
            "When did I go to Edinburgh?",
        ),
        F(
            d(6, 15),
            ["Ran my first half marathon today in 1:58! Legs are dead."],
            ["What was my time in the 21 km race?", "Did I ever finish a long-distance run?"],
            ["half marathon time"],
            "When did I run the half marathon?",
        ),
        F(
            d(6, 28),
            ["Saw Coldplay live at Wembley with Lena, what a show."],
            ["Which band did I see in concert with my cousin?"],
            ["Coldplay Wembley"],
            "When was the Coldplay concert?",
        ),
        F(
            d(7, 12),
            ["Back from Barcelona, the Sagrada Familia was worth the queue."],
            ["Which Gaudi church did I visit?"],
            ["Barcelona Sagrada"],
            "When was I in Barcelona?",
        ),
        F(
            d(8, 2),
            ["Anna moved from Lisbon to Porto, she found a flat by the river."],
            ["Which city is my sister living in these days?", "Did my sister relocate?"],
            ["Anna Porto flat"],
            "When did Anna move to Porto?",
            key="sister-city-new",
        ),
        F(
            d(8, 23),
            ["Mia starts at St Peter's primary school in York next month."],
            ["Which school will my daughter attend?"],
            ["Mia school St Peter's"],
            None,
            key="mia-school",
        ),
        F(
            d(9, 6),
            ["Anna married Marco today in Porto, I cried through the vows."],
            ["Who did my sister marry?", "Whose wedding did I go to in Portugal?"],
            ["Anna Marco wedding"],
            "When was Anna's wedding?",
            key="anna-marco",
        ),
        F(
            d(9, 7),
            ["Marco is a chef, he runs a little seafood restaurant in Porto."],
            ["What does Marco cook for a living?"],
            ["Marco chef restaurant"],
            None,
            False,
            key="marco-job",
        ),
        F(
            d(9, 20),
            ["We bought a second-hand Skoda Octavia estate, blue."],
            ["What car do we drive now?"],
            ["Skoda Octavia"],
            "When did we buy the car?",
        ),
        F(
            d(10, 4),
            ["Adopted a grey kitten from the shelter, we named her Pepper."],
            ["What is our new pet called?", "Did we get a cat?"],
            ["kitten Pepper"],
            "When did we adopt Pepper?",
            key="pepper",
        ),
        F(
            d(10, 18),
            ["Copenhagen for a work conference, Nyhavn was freezing."],
            ["Where was the work trip in autumn?"],
            ["Copenhagen conference"],
            "When was the Copenhagen conference?",
        ),
        F(
            d(10, 25),
            ["Pepper has her vaccinations at the Abbey vet on Tuesday."],
            ["Which vet practice does the kitten go to?"],
            ["Pepper vet Abbey"],
            None,
            False,
            key="pepper-vet",
        ),
        F(
            d(11, 8),
            ["Tom got engaged to his girlfriend Priya!"],
            ["Who is my brother going to marry?"],
            ["Tom Priya engaged"],
            "When did Tom get engaged?",
            key="tom-priya",
        ),
        F(
            d(11, 9),
            ["Priya is a paediatric doctor in Manchester."],
            ["What is Priya's profession?"],
            ["Priya doctor"],
            None,
            False,
            key="priya-job",
        ),
        F(
            d(12, 6),
            ["Jordan and I had a weekend in Paris, the Christmas lights on the Champs-Elysees."],
            ["Where did we spend a romantic weekend in December?"],
            ["Paris Champs-Elysees"],
            "When were we in Paris?",
        ),
        F(
            d(12, 25),
            ["Christmas at Mum's in Bristol, twelve of us around the table."],
            ["Where did we celebrate Christmas?"],
            ["Christmas Bristol"],
            None,
        ),
        F(
            d(1, 3, 2026),
            ["Started a dry January and a 10k training plan."],
            ["What new year resolutions did I make?"],
            ["dry January 10k"],
            "When did I start the 10k plan?",
        ),
        F(
            d(1, 7, 2026),
            ["Jordan started a new job at the Riverside clinic this week."],
            ["Where does my partner work now?"],
            ["Jordan Riverside clinic"],
            "When did Jordan change jobs?",
            key="jordan-newjob",
        ),
        F(
            d(1, 9, 2026),
            ["Mia lost her first tooth at school today."],
            ["What happened with my daughter's teeth?"],
            ["Mia tooth"],
            "When did Mia lose her tooth?",
        ),
        F(
            d(1, 11, 2026),
            ["Went ice skating with the kids at the outdoor rink in York."],
            ["What winter activity did I do with the children?"],
            ["ice skating rink"],
            "When did we go ice skating?",
        ),
    ]


# Two-memory questions: (question, [fact keys])
TWO = [
    ("What does my sister's husband do for a living?", ["anna-marco", "marco-job"]),
    ("What does my brother's fiancee do?", ["tom-priya", "priya-job"]),
    ("In which city does my sister's husband have his restaurant?", ["anna-marco", "marco-job"]),
    ("Where does the kitten we adopted get vaccinated?", ["pepper", "pepper-vet"]),
    ("My son is allergic to something; what does my brother do for work?", ["leo-allergy", "brother-job"]),
    ("Which of my siblings lives in Manchester and what is their job?", ["brother-city", "brother-job"]),
    ("Where did I work before Northwind, and what did I do there?", ["job1", "job2"]),
    ("Where did we live before York?", ["home1", "home2"]),
    ("Which city did Anna live in before Porto?", ["sister-city", "sister-city-new"]),
    ("Which school will Mia go to, and what instrument does she play?", ["mia-school", "daughter-hobby"]),
    ("What jobs do my mum and dad have or had?", ["mother-job", "father-job"]),
    ("Where do my cousin and my mother live?", ["cousin-city", "mother-city"]),
    ("What do my partner's old and new jobs look like?", ["partner-job", "jordan-newjob"]),
    ("Which hobbies do my brother and my cousin have?", ["brother-hobby", "cousin-hobby"]),
]

# Small talk: the same people, places and words as the facts, answering nothing; each with the assistant's
# reply (specific, as a model's replies are, not one canned line repeated).
FILLER = [
    ("Can you recommend a good book about {topic}?", "For {topic}, a readable start is a short introduction from a university press."),
    ("What's a quick dinner I can make with {food}?", "With {food} you could do a quick curry or a frittata in twenty minutes."),
    ("How many kilometres is it from Leeds to {city}?", "Leeds to {city} is a fair distance; by plane it's a few hours door to door."),
    ("Remind me how to convert {n} Fahrenheit to Celsius.", "Subtract 32 from {n} and multiply by 5/9."),
    ("The weather is awful again, {weather} all day.", "Sorry to hear it; {weather} all day is grim. A warm drink helps."),
    ("I'm thinking about maybe visiting {city} someday.", "{city} is worth it; spring and autumn are the pleasant seasons there."),
    ("Do you know any good podcasts about {topic}?", "There are several good {topic} podcasts; pick one with short episodes."),
    ("My {rel} sent me a funny video about {topic}, haha.", "Ha, a {topic} video from your {rel} sounds fun."),
    ("Help me write a short thank-you note to my {rel}.", "Dear {rel}, thank you so much for everything, it meant a lot."),
    ("Is {food} healthy to eat every day?", "{food} is fine daily in normal portions, as part of a varied diet."),
    ("What's the capital of {country} again?", "You can look up the capital of {country}; happy to quiz you on it."),
    ("Tired today, work was long and the kids were loud.", "That sounds draining. Maybe an early night?"),
    ("Any tips for sleeping better when it's {weather}?", "Keep the bedroom cool and dark, and skip screens before bed."),
    ("Translate 'good morning' into {language}, please.", "Here is 'good morning' in {language}, with the pronunciation."),
    ("I should really call my {rel} more often.", "A short call to your {rel} each week is a nice habit."),
]  # fmt: skip
FILL = {
    "topic": ["history", "running", "gardening", "architecture", "cooking", "chess", "piano", "cats"],
    "food": ["lentils", "chickpeas", "leftover rice", "spinach", "eggs", "tofu", "salmon"],
    "city": ["Lisbon", "Porto", "Rome", "Berlin", "Paris", "Manchester", "Bristol", "Edinburgh", "Oslo"],
    "n": ["50", "72", "90", "100"],
    "weather": ["rain", "drizzle", "wind", "fog", "sleet"],
    "rel": ["sister", "brother", "mum", "dad", "cousin", "partner"],
    "country": ["Portugal", "Denmark", "Italy", "Spain", "Norway"],
    "language": ["Portuguese", "Italian", "Danish", "German"],
}
EVENT_REPLIES = [
    "That sounds wonderful, thanks for telling me! ({gist})",
    "Wow, what a day. How are you feeling after that? ({gist})",
    "Noted: {gist}",
    "Lovely, I'll remember that: {gist}",
    "Congratulations, that's big news. ({gist})",
    "Thanks for sharing. I've noted it: {gist}",
]
MONTHS = [
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
]  # fmt: skip


def split_of(qid: str) -> str:
    h = hashlib.sha256(f"{SEED}:{qid}".encode()).digest()[0]
    return "tune" if h % 2 == 0 else "test"


def build() -> dict[str, object]:
    rnd = random.Random(SEED)
    facts = people_facts(rnd) + own_facts()
    by_day: dict[date, list[Fact]] = {}
    for f in facts:
        by_day.setdefault(f.day, []).append(f)
    # About 150 chat days: every fact's day, plus small-talk days.
    days = set(by_day)
    start, end = date(2025, 1, 2), date(2026, 1, 11)
    while len(days) < 150:
        days.add(start + timedelta(days=rnd.randrange((end - start).days + 1)))
    turns: list[dict[str, object]] = []
    counter = 0

    def add(speaker: str, content: str, at: datetime, fact: Fact | None = None) -> str:
        nonlocal counter
        counter += 1
        tid = f"t{counter:04d}"
        turns.append(
            {
                "id": tid,
                "speaker": speaker,
                "content": content,
                "at": at.astimezone(ZoneInfo("UTC")).isoformat(),
                "local": at.isoformat(),
                "session": day.isoformat(),
            }
        )
        if fact is not None:
            fact.tid = tid
        return tid

    for day in sorted(days):
        at = datetime(
            day.year, day.month, day.day, rnd.choice([8, 12, 19, 20, 21]), rnd.randrange(60), tzinfo=TZ
        )
        items: list[Fact | None] = list(by_day.get(day, [])) + [None] * rnd.randint(1, 3)
        rnd.shuffle(items)
        for item in items:
            if item is None:
                ask_t, reply_t = rnd.choice(FILLER)
                fill = {k: rnd.choice(v) for k, v in FILL.items()}
                add("user", ask_t.format(**fill), at)
                at += timedelta(minutes=rnd.randint(1, 4))
                add("assistant", reply_t.format(**fill), at)
            else:
                said = rnd.choice(item.says)
                add("user", said, at, item)
                at += timedelta(minutes=rnd.randint(1, 4))
                # The reply restates a few words of the message (as a model's replies do).
                gist = " ".join(said.rstrip(".!").split()[:6]) + "..."
                add("assistant", item.reply or rnd.choice(EVENT_REPLIES).format(gist=gist), at)
            at += timedelta(minutes=rnd.randint(1, 6))

    questions: list[dict[str, object]] = []

    def ask(kind: str, question: str, evidence: list[str]) -> None:
        qid = f"q{len(questions) + 1:04d}"
        questions.append(
            {"id": qid, "kind": kind, "question": question, "evidence": evidence, "split": split_of(qid)}
        )

    keyed = {f.key: f for f in facts if f.key}
    # Facts that changed during the year: a question about them is answered by the old and the new turn.
    changed = {"sister-city": "sister-city-new", "partner-job": "jordan-newjob"}
    for f in facts:
        ev = [f.tid] + ([keyed[changed[f.key]].tid] if f.key in changed else [])
        for p in f.paraphrase:
            ask("paraphrase", p, ev)
        for k in f.keyword:
            ask("keyword", k, ev)
        if f.when:
            ask("when", f.when, [f.tid])
    for question, keys in TWO:
        ask("two", question, [keyed[k].tid for k in keys])
    # Periods: every month (three phrasings), and a few relative ones, counted from NOW in the user's zone.
    events = [f for f in facts if f.event]

    def in_period(lo: date, hi: date) -> list[str]:
        return [f.tid for f in sorted(events, key=lambda f: f.day) if lo <= f.day < hi]

    for m in range(1, 13):
        lo = date(2025, m, 1)
        hi = date(2025 + (m == 12), m % 12 + 1, 1)
        ev = in_period(lo, hi)
        if not ev:
            continue
        name = MONTHS[m - 1]
        ask("range", f"What did I do in {name} 2025?", ev)
        if m == NOW.month:  # asked in January, "January" alone means this one: name the year
            ask("range", f"{name} 2025 events", ev)
            ask("range", f"What happened in {name} of last year?", ev)
            continue
        ask("range", rnd.choice([f"What happened last {name}?", f"Anything notable from {name}?"]), ev)
        ask(
            "range",
            rnd.choice([f"Remind me what I was up to in {name} last year", f"{name} 2025 events"]),
            ev,
        )
    today = NOW.date()
    rel = [
        ("What did I do yesterday?", today - timedelta(days=1), today),
        ("What did I tell you about last week?", date(2026, 1, 5), date(2026, 1, 12)),
        ("What happened in the last few days?", today - timedelta(days=5), today),
        ("What did I do last month?", date(2025, 12, 1), date(2026, 1, 1)),
        ("What did I do on 15 June 2025?", date(2025, 6, 15), date(2025, 6, 16)),
        ("What happened on 6 September 2025?", date(2025, 9, 6), date(2025, 9, 7)),
        ("What happened in the summer of 2025? (June to August)", date(2025, 6, 1), date(2025, 9, 1)),
        ("What did I do three months ago?", date(2025, 10, 1), date(2025, 11, 1)),
    ]
    for question, lo, hi in rel:
        ev = in_period(lo, hi)
        if ev:
            ask("range", question, ev)
    return {
        "description": "One fictional user's year of chats; see bench/memory_eval/make_eval.py",
        "seed": SEED,
        "timezone": str(TZ),
        "now": NOW.isoformat(),
        "turns": turns,
        "questions": questions,
    }


def main() -> None:
    data = build()
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    qs = data["questions"]
    assert isinstance(qs, list)
    kinds: dict[str, int] = {}
    for q in qs:
        kinds[q["kind"]] = kinds.get(q["kind"], 0) + 1
    turns = data["turns"]
    assert isinstance(turns, list)
    print(f"{len(turns)} turns, {len(qs)} questions {kinds}; wrote {OUT} ({OUT.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
