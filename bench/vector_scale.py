"""Vector search at scale in one user's scope: the in-process cache (before) against the
on-disk index (after, memory/search/semantic/disk.py), issue 34.

    .venv/bin/python bench/vector_scale.py [--rows 100000] [--dim 1536] [--db sqlite]
        [--queries 100] [--before-queries 5] [--modes before,after] [--data DIR] [--write]

Data: `--rows` unit vectors for one (user, agent) inserted straight into `embeddings`,
plus 2% as many of other users. Not uniform random (no ANN benchmark should be): a
mixture of 2,000 topics of Zipf-distributed sizes in a 128-dimension latent space
projected to `--dim`, plus a shared direction and isotropic noise, so cosines look like
a sentence model's (random pairs about 0.1, the 99th percentile about 0.65; the
nearest of a query 0.6-0.7). Queries are fresh draws from the same mixture; their exact
top 50 (float32 cosine over every row of the scope) is the ground truth.

Each mode runs in a child process (its own RSS) on the same database (kept in `--data`,
reused when it holds the same rows and dimension): a search asks the 50 nearest and the
similarity of 50 given items, as hybrid search does. Reported: CPU (the whole process,
threads included) and wall per search, p50/p95; recall@50 against exact; the first
search (the cache's load, or the index's build); the longest event-loop stall (a 5 ms
ticker's worst lateness) during the searches and during the first one; RSS after the
searches (anonymous and file-backed: the index's mapped pages are file-backed, shared
by processes and reclaimable) and the peak. The index is built in a worker process
(memory/search/semantic/disk.py): its CPU and peak RSS are read from /proc and reported
apart. (`--sweep` and `--scan-max`, which varied the HNSW graph's walk, went with the
graph: every segment is flat now.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import append_results, machine, percentile  # noqa: E402
from memory.contract.types import utcnow  # noqa: E402
from memory.search.semantic import disk as disk_index  # noqa: E402
from memory.search.semantic.index import VectorIndex  # noqa: E402
from memory.search.semantic.store import embeddings  # noqa: E402
from memory.storage.db import create_engine, migrate  # noqa: E402

USER, AGENT, MODEL = 1, "default", "bench-model"
CHUNK = 5000
K = 50
TOPICS, LATENT = 2000, 128


class Mixture:
    """The topic mixture every vector and query is drawn from (seeded)."""

    def __init__(self, dim: int, seed: int = 34) -> None:
        rng = np.random.default_rng(seed)
        self.dim = dim
        self.basis = rng.standard_normal((LATENT, dim), dtype=np.float32) / np.sqrt(LATENT)
        mean = rng.standard_normal(dim).astype(np.float32)
        self.mean = mean / np.linalg.norm(mean)
        self.centres = rng.standard_normal((TOPICS, LATENT), dtype=np.float32)
        sizes = rng.zipf(1.3, TOPICS).astype(float)
        self.p = sizes / sizes.sum()

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        topic = rng.choice(TOPICS, n, p=self.p)
        z = self.centres[topic] + 0.8 * rng.standard_normal((n, LATENT), dtype=np.float32)
        noise = rng.standard_normal((n, self.dim), dtype=np.float32) * (1.5 / np.sqrt(self.dim))
        x = z @ self.basis + 0.35 * self.mean + noise
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


async def prepare(url: str, rows: int, dim: int, queries: int, truth_path: Path) -> None:
    """Fill the database and compute the queries' exact top K (kept in `truth_path`)."""
    mix = Mixture(dim)
    rng = np.random.default_rng(1)
    qs = mix.draw(np.random.default_rng(2), queries)
    best_ids = np.full((queries, K), -1, np.int64)
    best = np.full((queries, K), -np.inf, np.float32)
    engine = create_engine(url)
    await migrate(engine)
    now = utcnow()
    others = rows // 50
    next_id = 1
    for user, count in ((1000, others // 2), (USER, rows), (1001, others - others // 2)):
        for lo in range(0, count, CHUNK):
            vecs = mix.draw(rng, min(CHUNK, count - lo))
            ids = np.arange(next_id, next_id + len(vecs))
            next_id += len(vecs)
            async with engine.begin() as conn:
                await conn.execute(
                    embeddings.insert(),
                    [
                        {
                            "id": int(i),
                            "source": "message",
                            "item_key": str(i),
                            "item_id": int(i),
                            "user_id": user,
                            "agent_id": AGENT,
                            "model": MODEL,
                            "dim": dim,
                            "vector": v.tobytes(),
                            "created_at": now,
                        }
                        for i, v in zip(ids, vecs, strict=True)
                    ],
                )
            if user == USER:  # running exact top K over the scope
                scores = np.concatenate([best, qs @ vecs.T], axis=1)
                cand = np.concatenate([best_ids, np.broadcast_to(ids, (queries, len(ids)))], 1)
                top = np.argpartition(-scores, K - 1, axis=1)[:, :K]
                best = np.take_along_axis(scores, top, 1)
                best_ids = np.take_along_axis(cand, top, 1)
    if engine.dialect.name == "postgresql":
        async with engine.connect() as conn:
            await conn.exec_driver_sql("ANALYZE embeddings")
    await engine.dispose()
    np.savez(truth_path, queries=qs, truth=best_ids)


def _rss() -> dict[str, float]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) / 1024
    out["peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


class Ticker:
    """The event loop's worst lateness while running (a stall of other chats)."""

    def __init__(self, every_s: float = 0.005) -> None:
        self.every_s, self.worst = every_s, 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(self.every_s)
            self.worst = max(self.worst, time.perf_counter() - t0 - self.every_s)

    def reset(self) -> float:
        worst, self.worst = self.worst, 0.0
        return worst

    def __enter__(self) -> Ticker:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def _searches(
    index: VectorIndex, qs: np.ndarray, truth: np.ndarray, keys: list[str], rng: Any
) -> tuple[list[float], list[float], list[float]]:
    """Each query's CPU, wall and recall@K: K nearest plus K given items, as hybrid asks."""
    cpu, wall, recall = [], [], []
    for q, want in zip(qs, truth, strict=True):
        also = [("message", k) for k in rng.choice(keys, K, replace=False)]
        c0, w0 = time.process_time(), time.perf_counter()
        hits = await index.search(USER, AGENT, q, limit=K, also=also)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        got = {int(h.key) for h in hits if h.nearest}
        recall.append(len(got & {int(i) for i in want}) / K)
    return cpu, wall, recall


def _builder_usage() -> dict[str, float]:
    """CPU seconds and peak RSS (MB) of the index builder process, if one ran here."""
    pool = disk_index._pool
    out = {"cpu_s": 0.0, "peak_mb": 0.0}
    for pid in getattr(pool, "_processes", None) or {}:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        out["cpu_s"] += (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                out["peak_mb"] = max(out["peak_mb"], int(line.split()[1]) / 1024)
    return out


async def measure(mode: str, url: str, data: Path, n_queries: int) -> dict[str, Any]:
    saved = np.load(data / "truth.npz")
    qs, truth = saved["queries"][:n_queries], saved["truth"][:n_queries]
    engine = create_engine(url)
    if mode == "before":
        index = VectorIndex(engine, MODEL)  # today's defaults: 256 MiB of cache
    else:
        index = VectorIndex(engine, MODEL, index_dir=data / "vectors")
        assert index.disk is not None
        index.disk.build_wait_s = None  # the first search waits for the build, measured
    rng = np.random.default_rng(3)
    async with engine.connect() as conn:
        keys = [
            str(k)
            for k in (
                await conn.execute(
                    embeddings.select()
                    .with_only_columns(embeddings.c.item_key)
                    .where(embeddings.c.user_id == USER)
                    .limit(2000)
                )
            ).scalars()
        ]
    out: dict[str, Any] = {"mode": mode}
    with Ticker() as ticker:
        c0, w0 = time.process_time(), time.perf_counter()
        await index.search(USER, AGENT, qs[0], limit=K)
        out["first_cpu_s"], out["first_wall_s"] = time.process_time() - c0, time.perf_counter() - w0
        out["first_stall_ms"] = ticker.reset() * 1000
        cpu, wall, recall = await _searches(index, qs, truth, keys, rng)
        out["stall_ms"] = ticker.reset() * 1000
    out.update(
        cpu_p50_ms=percentile(cpu, 0.5) * 1000,
        cpu_p95_ms=percentile(cpu, 0.95) * 1000,
        wall_p50_ms=percentile(wall, 0.5) * 1000,
        wall_p95_ms=percentile(wall, 0.95) * 1000,
        recall=float(np.mean(recall)),
        queries=len(qs),
        rss=_rss(),
    )
    if mode == "after":
        out["builder"] = _builder_usage()
        out["index_mb"] = sum(p.stat().st_size for p in (data / "vectors").rglob("seg-*")) / 2**20
    await engine.dispose()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=1536)
    parser.add_argument("--db", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--before-queries", type=int, default=5)
    parser.add_argument("--modes", default="before,after")
    parser.add_argument("--data", default="", help="kept between runs (default: a temp dir)")
    parser.add_argument("--rebuild", action="store_true", help="delete the index first")
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--child", default="", help="run one mode here, print its JSON")
    args = parser.parse_args()
    data = Path(args.data or f"/tmp/mnemo-vector-scale-{args.db}-{args.rows}-{args.dim}")
    data.mkdir(parents=True, exist_ok=True)
    if args.db == "sqlite":
        url = f"sqlite+aiosqlite:///{data / 'bench.db'}"
    else:
        name = f"vscale_{args.rows}_{args.dim}"
        url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    if args.child:
        n = args.before_queries if args.child == "before" else args.queries
        result = measure(args.child, url, data, n)
        print(json.dumps(asyncio.run(result)))
        return 0
    truth = data / "truth.npz"
    if not truth.is_file():
        if args.db == "postgres":
            subprocess.run(["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", name])
            subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", name], check=True)
        (data / "bench.db").unlink(missing_ok=True)
        t0 = time.perf_counter()
        asyncio.run(prepare(url, args.rows, args.dim, args.queries, truth))
        print(f"prepared in {time.perf_counter() - t0:.0f} s", flush=True)
    if args.rebuild:
        shutil.rmtree(data / "vectors", ignore_errors=True)
    results = []
    for mode in args.modes.split(","):
        child = [sys.executable, __file__, *sys.argv[1:], "--child", mode]
        done = subprocess.run(child, check=True, capture_output=True, text=True)
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), flush=True)
    lines = [
        f"## Vectors at scale, {args.rows:,} x {args.dim} in one scope "
        f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)",
        "",
        f"- machine: {machine()}",
        f"- command: `.venv/bin/python bench/vector_scale.py {shlex.join(sys.argv[1:])}`",
        f"- {args.db}; clustered vectors (module docstring); 50 nearest + 50 given items "
        "per search, as hybrid asks; CPU of the whole process per search",
        "",
        "| path | first search (CPU / wall) | CPU p50 / p95 | wall p50 / p95 | recall@50 "
        "| loop stall: first / searches | RSS anon + file (peak) | index "
        "| builder CPU (peak RSS) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        rss = r["rss"]
        lines.append(
            f"| {r['mode']} | {r['first_cpu_s']:.1f} s / {r['first_wall_s']:.1f} s "
            f"| {r['cpu_p50_ms']:.1f} / {r['cpu_p95_ms']:.1f} ms "
            f"| {r['wall_p50_ms']:.1f} / {r['wall_p95_ms']:.1f} ms | {r['recall']:.4f} "
            f"| {r['first_stall_ms']:.0f} / {r['stall_ms']:.0f} ms "
            f"| {rss['RssAnon']:.0f} + {rss['RssFile']:.0f} MB ({rss['peak']:.0f} MB) "
            f"| {r.get('index_mb', 0):.0f} MB "
            f"| {r.get('builder', {}).get('cpu_s', 0):.0f} s "
            f"({r.get('builder', {}).get('peak_mb', 0):.0f} MB) |"
        )
    text = "\n".join(lines)
    print(text)
    if args.write:
        append_results(text)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
