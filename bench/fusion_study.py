"""Which fusion for hybrid search (memory/fusion.py)? Variants scored on LoCoMo dev from the
same two lists, so only the fusion differs.

The lists are the product's: lcm on SQLite answers each question with `full_text` (its 50
best, BM25 scores), and the bench's all-MiniLM-L6-v2 server (bench/embedding_server.py)
gives each turn's and question's vector (the 50 nearest by cosine, as the vector index
ranks them). Scored like bench/recall.py (turn-level recall@k, the data README's rules):

- words alone, meaning alone;
- reciprocal rank fusion (k=60);
- `memory.fusion.fuse` (min-max normalised weighted scores) at several weights of meaning.

    python -m bench.fusion_study [--weights 0.2,0.3,0.4,0.5,0.6] [--conversations N]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import aiohttp
import numpy as np

from bench.recall import (
    EMBED_BATCH,
    RRF_K,
    Conversation,
    Outcome,
    Rankings,
    chat_of,
    default_data,
    embed,
    embedding_server,
    fresh_provider,
    load_locomo,
    scored,
    stored_dia_ids,
    table,
)
from memory.fusion import fuse
from memory.types import Message, SearchMode, SearchQuery, SearchScope

POOL = 50

Ranked = list[tuple[str, float]]  # dia_id, score: best first


async def word_lists(convs: list[Conversation]) -> list[Ranked]:
    """lcm on SQLite: each question's POOL best turns by `full_text`."""
    with tempfile.TemporaryDirectory() as tmp:
        async with fresh_provider("lcm", "sqlite", Path(tmp), None) as (provider, engine):
            for i, conv in enumerate(convs):
                session = chat_of(i, conv)
                await provider.bootstrap(session)
                await provider.append(
                    session, *(Message("user", t.content, created_at=t.at) for t in conv.turns)
                )
            dia = await stored_dia_ids(engine, convs)
            out = []
            for i, conv in enumerate(convs):
                for q in conv.questions:
                    query = SearchQuery(
                        q.text, scope=SearchScope.MESSAGES, limit=POOL, mode=SearchMode.FULL_TEXT
                    )
                    hits = await provider.search(chat_of(i, conv), query)
                    out.append([(dia[h.source_id], h.score) for h in hits])
    return out


async def meaning_lists(convs: list[Conversation], url: str) -> list[Ranked]:
    """Each question's POOL nearest turns by cosine of the MiniLM vectors."""
    out = []
    async with aiohttp.ClientSession() as http:
        for conv in convs:
            texts = [t.content for t in conv.turns]
            turns = np.concatenate(
                [
                    await embed(http, url, texts[i : i + EMBED_BATCH])
                    for i in range(0, len(texts), EMBED_BATCH)
                ]
            )
            questions = await embed(http, url, [q.text for q in conv.questions])
            for qv in questions:
                sims = turns @ qv
                top = np.argsort(-sims)[:POOL]
                out.append([(conv.turns[j].dia_id, float(sims[j])) for j in top])
    return out


def rrf(words: Ranked, meaning: Ranked) -> list[str]:
    scores: dict[str, float] = {}
    for ranked in (words, meaning):
        for rank, (key, _) in enumerate(ranked):
            scores[key] = scores.get(key, 0.0) + 1 / (RRF_K + rank + 1)
    return sorted(scores, key=scores.__getitem__, reverse=True)


def row(name: str, convs: list[Conversation], rank: Callable[[int], list[str]], n: int) -> Outcome:
    out = Rankings()
    for i in range(n):
        out.ranked.append(rank(i))
        out.seconds.append(0.0)
    return scored(Outcome(name, "sqlite", "hybrid"), convs, out)


async def study(convs: list[Conversation], weights: Sequence[float]) -> list[Outcome]:
    words = await word_lists(convs)
    with embedding_server() as url:
        meaning = await meaning_lists(convs, url)
    n = len(words)
    rows = [
        row("words (lcm full_text)", convs, lambda i: [k for k, _ in words[i]], n),
        row("meaning (MiniLM)", convs, lambda i: [k for k, _ in meaning[i]], n),
        row(f"RRF k={RRF_K}", convs, lambda i: rrf(words[i], meaning[i]), n),
    ]
    for w in weights:
        rows.append(
            row(
                f"fuse, meaning weight {w}",
                convs,
                lambda i, w=w: [str(f.key) for f in fuse(words[i], meaning[i], w)],
                n,
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default="0.2,0.3,0.4,0.5,0.6")
    parser.add_argument("--conversations", type=int, default=None)
    parser.add_argument("--data", type=Path, default=None)
    args = parser.parse_args(argv)
    data = args.data or default_data()
    if data is None:
        print("fusion_study: no LoCoMo data (give --data)", file=sys.stderr)
        return 2
    convs = load_locomo(data, args.conversations)
    weights = [float(w) for w in args.weights.split(",")]
    print(table(asyncio.run(study(convs, weights))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
