"""Cached inputs for hybrid-search studies on LoCoMo dev: the product's lexical lists and
all-MiniLM-L6-v2 vectors of any text variant, computed once and kept on disk, so a study
of fusion or of what is embedded costs seconds, not a re-load and re-embed per run (the
machine has 2 shared cores; one embedding pass over 2,760 turns takes about 75 s).

- `word_lists(convs, depth, db=)`: lcm on SQLite or PostgreSQL, `full_text`, each
  question's `depth` best turns with their BM25 scores (the product's ranking), as
  [(dia_id, score)]. Cached by the data alone: after a change of the lexical ranking,
  pass a new `tag` (or empty the cache folder).
- `vectors(texts)`: unit vectors from bench/embedding_server.py, one row per text, cached
  by the texts' hash (a started server is reused for the rest of the process).

Cache folder: $MNEMO_BENCH_CACHE or ~/.cache/mnemo-bench. Needs the `bench` extra (the
embeddings server).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

import aiohttp
import numpy as np

from bench.recall import (
    EMBED_BATCH,
    Conversation,
    chat_of,
    embed,
    embedding_server,
    fresh_provider,
    stored_dia_ids,
)
from memory.contract.types import Message, SearchMode, SearchQuery, SearchScope
from memory.search import lexical

CACHE = Path(os.environ.get("MNEMO_BENCH_CACHE", Path.home() / ".cache" / "mnemo-bench"))

Ranked = list[tuple[str, float]]

_server: contextlib.ExitStack | None = None
_url: str | None = None


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()[:24]


def _server_url() -> str:
    global _server, _url
    if _url is None:
        _server = contextlib.ExitStack()
        _url = _server.enter_context(embedding_server())
    return _url


def close() -> None:
    global _server, _url
    if _server is not None:
        _server.close()
    _server, _url = None, None


def vectors(texts: list[str]) -> np.ndarray:
    """Unit vectors of `texts` (cached on disk by their hash)."""
    path = CACHE / f"vec-{_digest('minilm', texts)}.npy"
    if path.is_file():
        return np.load(path)
    url = _server_url()

    async def run() -> np.ndarray:
        async with aiohttp.ClientSession() as http:
            return np.concatenate(
                [
                    await embed(http, url, texts[i : i + EMBED_BATCH])
                    for i in range(0, len(texts), EMBED_BATCH)
                ]
            )

    out = asyncio.run(run())
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, out)
    return out


def word_lists(
    convs: list[Conversation],
    depth: int = 200,
    tag: str = "",
    db: str = "sqlite",
    context_weight: float | None = None,
    bm25: tuple[float, float] | None = None,
) -> list[Ranked]:
    """lcm on `db`: each question's `depth` best turns by `full_text` (cached; `tag`
    names the lexical code's version, so a change of ranking is measured afresh).
    `context_weight`: `memory.search.lexical.CONTEXT_WEIGHT` for this run (None: the
    product's); `bm25`: (K1, B) for this run (None: the product's)."""
    weight = lexical.CONTEXT_WEIGHT if context_weight is None else context_weight
    k1, b = (lexical.K1, lexical.B) if bm25 is None else bm25
    parts: tuple[object, ...] = (
        "words",
        tag,
        depth,
        [(c.sample_id, len(c.turns)) for c in convs],
        weight,
    )
    if (k1, b) != (lexical.K1, lexical.B):  # the product's keep their cache key
        parts = (*parts, k1, b)
    key = _digest(*parts) if db == "sqlite" else _digest(*parts, db)
    path = CACHE / f"words-{key}.json"
    if path.is_file():
        return [[(d, s) for d, s in q] for q in json.loads(path.read_text())]

    async def run() -> list[Ranked]:
        with tempfile.TemporaryDirectory() as tmp:
            async with fresh_provider("lcm", db, Path(tmp), None) as (provider, engine):
                for i, conv in enumerate(convs):
                    session = chat_of(i, conv)
                    await provider.bootstrap(session)
                    await provider.append(
                        session,
                        *(Message("user", t.content, created_at=t.at) for t in conv.turns),
                    )
                dia = await stored_dia_ids(engine, convs)
                out = []
                for i, conv in enumerate(convs):
                    for q in conv.questions:
                        query = SearchQuery(
                            q.text,
                            scope=SearchScope.MESSAGES,
                            limit=depth,
                            mode=SearchMode.FULL_TEXT,
                        )
                        hits = await provider.search(chat_of(i, conv), query)
                        out.append([(dia[h.source_id], h.score) for h in hits])
        return out

    product = lexical.CONTEXT_WEIGHT, lexical.K1, lexical.B
    lexical.CONTEXT_WEIGHT, lexical.K1, lexical.B = weight, k1, b
    try:
        out = asyncio.run(run())
    finally:
        lexical.CONTEXT_WEIGHT, lexical.K1, lexical.B = product
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out))
    return out
