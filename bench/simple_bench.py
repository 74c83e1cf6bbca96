"""Benchmarks of the simple provider's single-file notes/archives store.

1. BM25 search p50 over 1k / 10k / 100k entries (`NotesFile.search`, the real read path)
   against the `bm25s` library on the same token lists and parameters (Lucene BM25,
   k1=1.5, b=0.75): the time ratio and the top-10 overlap.
2. apply (a Write of one entry) p50 at the same sizes: the atomic snapshot of the whole
   file (temp file + fsync + rename + directory fsync), the cost that grows with the file.

The corpus is synthetic and seeded: 90% notes of 20-80 words, 10% archives of 200-400
words, over a Zipf-distributed vocabulary, so a few words are very common (long posting
lists) and most are rare. Usage:

    .venv/bin/python bench/simple_bench.py [--sizes 1000 10000 100000] [--append-results]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import append_results, machine  # noqa: E402
from plugins.simple.bm25 import tokenize  # noqa: E402
from plugins.simple.notes_file import FORMAT, VERSION, NotesFile, Write  # noqa: E402

VOCAB = 30_000
QUERIES = 200
SEED = 20261126


def _vocabulary(rng: random.Random) -> list[str]:
    syllables = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"]
    words: set[str] = set()
    while len(words) < VOCAB:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def _zipf_sampler(rng: random.Random, words: list[str]):  # -> Callable[[int], list[str]]
    weights = [1.0 / (rank + 1) ** 1.05 for rank in range(len(words))]
    order = words[:]
    rng.shuffle(order)

    def sample(n: int) -> list[str]:
        return rng.choices(order, weights=weights, k=n)

    return sample


def build_file(path: Path, n: int, rng: random.Random, sample) -> None:  # type: ignore[no-untyped-def]
    """Write a valid notes file of `n` entries directly (as the store itself would)."""
    created = datetime(2026, 1, 1, tzinfo=UTC).isoformat()
    lines = [json.dumps({"format": FORMAT, "version": VERSION, "next_id": n + 1, "entries": n})]
    for i in range(1, n + 1):
        archive = rng.random() < 0.1
        words = sample(rng.randint(200, 400) if archive else rng.randint(20, 80))
        entry = {
            "id": i,
            "name": f"archive-session-{i}" if archive else f"note {i} {' '.join(sample(2))}",
            "aliases": [],
            "kind": "Archive" if archive else "Note",
            "created_at": created,
            "content": " ".join(words),
        }
        lines.append(json.dumps(entry, ensure_ascii=False, separators=(",", ":")))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _queries(rng: random.Random, sample) -> list[list[str]]:  # type: ignore[no-untyped-def]
    # Two or three words drawn from the same Zipf law as the texts: realistic mixes of
    # common and rare terms.
    out = []
    while len(out) < QUERIES:
        q = list(dict.fromkeys(sample(rng.randint(2, 3))))
        if len(q) >= 2:
            out.append(q)
    return out


def _p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def bench_size(n: int, directory: Path) -> dict[str, float]:
    rng = random.Random(SEED + n)
    words = _vocabulary(random.Random(SEED))
    sample = _zipf_sampler(rng, words)
    path = directory / f"{n}.mem"
    build_file(path, n, rng, sample)
    size_mb = path.stat().st_size / 1e6

    t0 = time.perf_counter()
    notes = NotesFile.open(path)
    open_s = time.perf_counter() - t0

    queries = _queries(rng, sample)
    ours: list[list[int]] = []
    ours_t: list[float] = []
    for q in queries:
        t = time.perf_counter()
        hits = notes.search(" ".join(q), 10)
        ours_t.append(time.perf_counter() - t)
        ours.append([h.entry.id for h in hits])

    import bm25s  # the reference implementation (dev dependency)

    entries = notes.entries()
    corpus_tokens = [tokenize(e.content) + tokenize(e.name) for e in entries]
    ids = [e.id for e in entries]
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    t0 = time.perf_counter()
    retriever.index(corpus_tokens, show_progress=False)
    ref_index_s = time.perf_counter() - t0
    ref_t: list[float] = []
    overlaps: list[float] = []
    for q, mine in zip(queries, ours, strict=True):
        t = time.perf_counter()
        docs, scores = retriever.retrieve([q], k=10, show_progress=False, n_threads=0)
        ref_t.append(time.perf_counter() - t)
        theirs = [ids[d] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]
        if theirs or mine:
            overlaps.append(len(set(theirs) & set(mine)) / max(len(theirs), len(mine)))

    # apply: Write of one entry, snapshot of the whole file each time.
    reps = 40 if n <= 10_000 else 12
    apply_t: list[float] = []
    for i in range(reps):
        target = entries[rng.randrange(len(entries))]
        t = time.perf_counter()
        notes.apply(Write(target.name, f"rewritten {i} " + " ".join(sample(40))))
        apply_t.append(time.perf_counter() - t)

    return {
        "entries": n,
        "file_mb": size_mb,
        "open_s": open_s,
        "search_p50_ms": _p50_ms(ours_t),
        "bm25s_p50_ms": _p50_ms(ref_t),
        "ratio": _p50_ms(ours_t) / _p50_ms(ref_t),
        "overlap": statistics.mean(overlaps) if overlaps else 1.0,
        "bm25s_index_s": ref_index_s,
        "apply_p50_ms": _p50_ms(apply_t),
        "apply_max_ms": max(apply_t) * 1000,
    }


def _filesystem(directory: Path) -> str:
    try:
        out = (
            subprocess.run(["df", "-T", str(directory)], capture_output=True, text=True, check=True)
            .stdout.splitlines()[-1]
            .split()
        )
        return f"{out[1]} on {out[0]}"
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--append-results", action="store_true", help="append to bench/HISTORY.md")
    args = parser.parse_args()

    import bm25s

    rows = []
    with tempfile.TemporaryDirectory(prefix="simple-bench-") as tmp:
        fs = _filesystem(Path(tmp))
        for n in args.sizes:
            row = bench_size(n, Path(tmp))
            rows.append(row)
            print(json.dumps({k: round(v, 3) for k, v in row.items()}), flush=True)

    table = [
        "| entries | file MB | open s | search p50 ms | bm25s p50 ms | ratio | top-10 overlap "
        "| apply p50 ms | apply max ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        table.append(
            f"| {r['entries']:,} | {r['file_mb']:.1f} | {r['open_s']:.2f} "
            f"| {r['search_p50_ms']:.2f} | {r['bm25s_p50_ms']:.2f} | {r['ratio']:.1f}x "
            f"| {r['overlap']:.1%} | {r['apply_p50_ms']:.1f} | {r['apply_max_ms']:.1f} |"
        )
    report = "\n".join(
        [
            "",
            "## simple: notes store — BM25 search vs bm25s, apply (snapshot) cost",
            "",
            f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
            f"- machine: {machine()}; temp files on {fs}; bm25s {bm25s.__version__}; "
            f"load average at the end {os.getloadavg()[0]:.1f} (machine shared with the team's "
            "test runs: treat the figures as upper bounds)",
            f"- command: `.venv/bin/python bench/simple_bench.py --sizes "
            f"{' '.join(map(str, args.sizes))}{' --append-results' if args.append_results else ''}`",
            f"- corpus: synthetic, seeded; 90% notes of 20-80 words, 10% archives of 200-400 "
            f"words, Zipf vocabulary of {VOCAB:,} words; {QUERIES} queries of 2-3 words, top 10",
            "- search: `NotesFile.search` (incremental index: dict postings + per-term numpy arrays, entries copied out) vs "
            "`bm25s.BM25.retrieve` (numpy, precomputed sparse scores) on identical token lists; "
            "overlap = |ours ∩ bm25s| / 10 per query (ties may order differently: bm25s scores "
            "in float32)",
            "- apply: `NotesFile.apply(Write(...))` of one entry = re-encode that entry + write "
            "the whole file to a temp file + fsync + rename + directory fsync",
            "",
            *table,
            "",
        ]
    )
    print(report)
    if args.append_results:
        append_results(report)


if __name__ == "__main__":
    main()
