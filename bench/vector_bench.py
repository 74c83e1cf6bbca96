"""Vector search within one user's scope (issue 14), on SQLite and PostgreSQL.

    .venv/bin/python bench/vector_bench.py [--db sqlite,postgres] [--rows 100000]
        [--dim 384] [--others 100000] [--queries 200] [--write]

`--rows` random unit vectors of `--dim` dimensions for one (user, agent), plus `--others`
spread over 100 other users, are inserted straight into the `embeddings` table. Then, with
a fresh `VectorIndex`:
- first load: the first search of the scope (reads every vector of the scope);
- search p50/p95 over `--queries` random queries (top 20), each one refreshing the scope
  (the query for rows newer than it holds) as every search does;
- search while 64 new vectors arrive before each query (the incremental refresh);
- the cache's size and the process's peak RSS.

Figures go to stdout and, with --write, are appended to bench/HISTORY.md.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shlex
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import append_results, machine, percentile  # noqa: E402
from memory.contract.types import utcnow  # noqa: E402
from memory.search.semantic.index import VectorIndex  # noqa: E402
from memory.search.semantic.store import embeddings  # noqa: E402
from memory.testing.databases import temp_engine  # noqa: E402

USER, AGENT, MODEL = 1, "default", "bench-model"
CHUNK = 5000


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    rows = rng.standard_normal((n, dim), dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


async def insert(engine, rng, n: int, dim: int, user_of, start: int) -> None:  # type: ignore[no-untyped-def]
    now = utcnow()
    for lo in range(0, n, CHUNK):
        vecs = unit_rows(rng, min(CHUNK, n - lo), dim)
        rows = [
            {
                "source": "message",
                "item_key": str(start + lo + i),
                "item_id": start + lo + i,
                "user_id": user_of(lo + i),
                "agent_id": AGENT,
                "model": MODEL,
                "dim": dim,
                "vector": v.tobytes(),
                "created_at": now,
            }
            for i, v in enumerate(vecs)
        ]
        async with engine.begin() as conn:
            await conn.execute(embeddings.insert(), rows)


async def run(kind: str, args: argparse.Namespace) -> dict[str, float]:
    rng = np.random.default_rng(14)
    with tempfile.TemporaryDirectory() as tmp:
        async with temp_engine(kind, Path(tmp)) as engine:
            started = time.perf_counter()
            await insert(engine, rng, args.others, args.dim, lambda i: 1000 + i % 100, 0)
            await insert(engine, rng, args.rows, args.dim, lambda i: USER, args.others)
            insert_s = time.perf_counter() - started
            if kind == "postgres":
                async with engine.connect() as conn:
                    await conn.exec_driver_sql("ANALYZE embeddings")
            index = VectorIndex(engine, MODEL, max_bytes=2**31)
            queries = unit_rows(rng, args.queries, args.dim)
            t0 = time.perf_counter()
            hits = await index.search(USER, AGENT, queries[0], limit=20)
            first_load = time.perf_counter() - t0
            assert len(hits) == 20
            times = []
            for q in queries:
                t0 = time.perf_counter()
                await index.search(USER, AGENT, q, limit=20)
                times.append(time.perf_counter() - t0)
            growing = []
            next_key = args.others + args.rows
            for q in queries[: max(1, args.queries // 4)]:
                await insert(engine, rng, 64, args.dim, lambda i: USER, next_key)
                next_key += 64
                t0 = time.perf_counter()
                await index.search(USER, AGENT, q, limit=20)
                growing.append(time.perf_counter() - t0)
            return {
                "insert_s": insert_s,
                "first_load_ms": first_load * 1000,
                "p50_ms": percentile(times, 0.5) * 1000,
                "p95_ms": percentile(times, 0.95) * 1000,
                "growing_p50_ms": percentile(growing, 0.5) * 1000,
                "cache_mb": index.nbytes / 2**20,
                "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="sqlite,postgres")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--others", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    lines = [
        f"## Vector search within one user's scope ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)",
        "",
        f"- machine: {machine()}",
        f"- command: `.venv/bin/python bench/vector_bench.py {shlex.join(sys.argv[1:])}`",
        f"- {args.rows:,} vectors of {args.dim} dimensions in the scope, {args.others:,} of "
        "100 other users in the table; top 20 of each query; exact cosine (numpy)",
        "",
        "| database | first load | search p50 | search p95 | p50, 64 new rows each time "
        "| cache | peak RSS |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind in args.db.split(","):
        r = asyncio.run(run(kind, args))
        lines.append(
            f"| {kind} | {r['first_load_ms']:.0f} ms | {r['p50_ms']:.1f} ms | {r['p95_ms']:.1f} ms "
            f"| {r['growing_p50_ms']:.1f} ms | {r['cache_mb']:.0f} MB | {r['rss_mb']:.0f} MB |"
        )
        print(lines[-1], flush=True)
    text = "\n".join(lines)
    print(text)
    if args.write:
        append_results(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
