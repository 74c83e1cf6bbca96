"""Search a user's memory: the one `Searcher.search` behind every SQL provider.

A provider hands `Recall` the indexed tables it searches (core's messages for all; lcm
adds its summaries) and any source of its own outside the database (simple's notes and
archives, an `ExtraSource`). `Recall` decides what a query means and merges the lists:

- `full_text`: BM25 over any of the query's non-stop words (memory/search/lexical.py), every
  source's hits merged by score. A query with no such word ("🐙", "%", "who are you") is
  searched literally instead, so anything stored can be found.
- `hybrid`: `full_text` fused with embedding similarity when the provider has embeddings
  (memory/search/fusion.py): the best HYBRID_POOL of each, so a hit found by meaning alone,
  sharing no word with the query, can rank (if its cosine reaches the model's
  `min_similarity`: a far neighbour is no match); without embeddings it is `full_text`,
  and an item not embedded yet is still found by its words. A message's meaning is the
  mean of its two vectors' cosines, alone and with the next message, when
  `embeddings.with_next` is on (memory/search/pairs.py).
- `substring`: the text literally, case-insensitive, newest first.

Scope: the memory belongs to the user (the group, in a group), so it is every
conversation of the session's (user, agent), current and
archived, and nothing else. Blank text finds nothing (an empty list, not an error). A
query made while a turn is answered (`in_turn`) leaves that turn out (memory/search/turn.py);
one with `since`/`before` searches that date range only (memory/search/window.py).
Results carry their time, the conversation they came from and what found them.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from memory.contract.capabilities import ExtraSource as ExtraSource
from memory.contract.embedding import VectorHit
from memory.contract.errors import InvalidArgument
from memory.contract.types import SearchMode, SearchQuery, SearchResult, SearchScope, Session
from memory.search import MAX_LIMIT, labels, lexical, pairs, turn, window
from memory.search.fusion import SEMANTIC_WEIGHT, SEMANTIC_WEIGHT_WITH_NEXT, fuse
from memory.search.lexical import TextIndex
from memory.search.text import clean_query, ranked_terms
from memory.storage.history import conversations

if TYPE_CHECKING:
    import numpy as np

    from memory.search.semantic.search import SemanticSearch

# Hybrid search fuses this many of each list's best, whatever the `limit`: enough that an
# item ranked low by one signal and high by the other is in both lists. The pool sets the
# min-max scales (memory/search/fusion.py), so a pool growing with `limit` made a page of
# 20 something else than the head of a page of 200; a `limit` past what the fused pool
# holds is filled with the word hits ranked after it, in their order. 30 and 100 were
# no better when chosen by leaving one conversation out (bench/constants_study.py).
HYBRID_POOL = 50
# Semantic sources a scope searches (None: all).
_VECTOR_SOURCES: dict[SearchScope, set[str] | None] = {
    SearchScope.BOTH: None,
    SearchScope.MESSAGES: {pairs.MESSAGE},
    SearchScope.SUMMARIES: {"summary", "archive"},
}
# Longer text is cut to its head: a pasted page is no query, and SQLite refuses LIKE
# patterns over 50,000 bytes.
MAX_QUERY_CHARS = 10_000
WORDS, SUBSTRING = labels.WORDS, "substring"


async def owned_conversations(conn: AsyncConnection, user_id: int, agent_id: str) -> list[int]:
    rows = await conn.execute(
        sa.select(conversations.c.id).where(
            conversations.c.user_id == user_id, conversations.c.agent_id == agent_id
        )
    )
    return list(rows.scalars())


def parse_query(query: SearchQuery) -> tuple[str, SearchMode, SearchScope, int]:
    """(text, mode, scope, limit) of `query`, validated; text "" means find nothing."""
    try:
        mode, scope = SearchMode(query.mode), SearchScope(query.scope)
    except ValueError as exc:
        raise InvalidArgument(f"bad search query: {exc}") from exc
    if isinstance(query.limit, bool) or not isinstance(query.limit, int) or query.limit < 1:
        raise InvalidArgument("search limit must be a whole number, at least 1")
    text = clean_query(query.text) if isinstance(query.text, str) else ""
    return text[:MAX_QUERY_CHARS], mode, scope, min(query.limit, MAX_LIMIT)


def _key(result: SearchResult) -> tuple[str, str]:
    return result.source_type, result.source_id


def _merged(lists: Sequence[list[SearchResult]], ranked: bool) -> list[SearchResult]:
    """Each source's list merged into one, best score first (`ranked`) or newest first.
    A merge, never a sort: each list keeps its source's own order (its ties broken by the
    source), and the merge reads only the head of every list, so the first n of a search
    for m > n are the search for n (each source was asked for its first n, or m)."""
    floor = datetime.min.replace(tzinfo=UTC)
    if ranked:
        return list(heapq.merge(*lists, key=lambda r: r.score, reverse=True))
    return list(heapq.merge(*lists, key=lambda r: r.timestamp or floor, reverse=True))


class Recall:
    def __init__(
        self,
        engine: AsyncEngine,
        indexes: Sequence[TextIndex],
        extra: ExtraSource | None = None,
        semantic: SemanticSearch | None = None,
    ) -> None:
        self.engine = engine
        self.indexes = list(indexes)
        self.extra = extra
        self.semantic = semantic

    def _indexes_for(self, scope: SearchScope) -> list[TextIndex]:
        if scope == SearchScope.BOTH:
            return self.indexes
        want_messages = scope == SearchScope.MESSAGES
        return [i for i in self.indexes if (i is lexical.MESSAGES) == want_messages]

    async def search(self, session: Session, query: SearchQuery) -> list[SearchResult]:
        text, mode, scope, limit = parse_query(query)
        dates = window.of(query)
        if not text:
            return []
        terms = [] if mode == SearchMode.SUBSTRING else ranked_terms(text)
        semantic = self.semantic if mode == SearchMode.HYBRID else None
        depth = max(limit, HYBRID_POOL) if semantic is not None else limit
        # The question's vector is asked for first and made while the words are searched:
        # the embedding is the slow part of a hybrid search.
        vector = asyncio.create_task(semantic.query_vector(text)) if semantic else None
        try:
            lists: list[list[SearchResult]] = []
            async with self.engine.connect() as conn:
                conv_ids = await owned_conversations(conn, session.user_id, session.agent_id)
                skip = await turn.in_progress(conn, session) if query.in_turn else frozenset()
                # The message before the turn: its pair vector quotes the question.
                paired = semantic is not None and semantic.pairs
                unpaired = await turn.quoting(conn, session) if skip and paired else frozenset()
                for index in self._indexes_for(scope):
                    found = await self._from_index(
                        conn, index, conv_ids, text, terms, depth + len(skip), dates
                    )
                    lists.append(turn.without(found, skip))
            if self.extra is not None:
                # Its items are dated after they are found: asked for more in a window.
                wanted = depth * window.DEEPER if dates else depth
                extra = await self.extra.search_extra(session, text, terms, scope, wanted)
                lists.append(dates.keep(extra)[:depth])
            ranked = _merged(lists, ranked=bool(terms))
            if vector is not None:
                ranked = await self._hybrid(
                    session,
                    conv_ids,
                    await vector,
                    terms or [text],
                    scope,
                    ranked,
                    skip,
                    dates,
                    unpaired,
                )
        finally:
            if vector is not None and not vector.done():
                vector.cancel()
        shown = ranked[:limit]
        if terms:
            async with self.engine.connect() as conn:
                await labels.label_context_hits(conn, shown, terms)
        return shown

    async def _hybrid(
        self,
        session: Session,
        conv_ids: list[int],
        vector: np.ndarray | None,
        needles: list[str],
        scope: SearchScope,
        lexical_hits: list[SearchResult],
        skip: frozenset[str] = frozenset(),
        dates: window.Window = window.ANY_TIME,
        unpaired: frozenset[str] = frozenset(),
    ) -> list[SearchResult]:
        """The first HYBRID_POOL of `lexical_hits` fused with the HYBRID_POOL items nearest
        to the question's `vector` in meaning (memory/search/fusion.py), then the rest of
        `lexical_hits` in their order; the messages `skip` (the turn in progress,
        memory/search/turn.py) and items outside `dates` are no item (the nearest are
        asked from a deeper pool then, and cut to HYBRID_POOL once out of it).

        With `SemanticSearch.pairs`, a message's meaning is the mean of its two vectors'
        cosines (memory/search/pairs.py): the nearest are asked over both, twice as many,
        each message found scored by both, and meaning weighs SEMANTIC_WEIGHT_WITH_NEXT;
        the pair vectors of `unpaired` (the message before the turn) do not count."""
        if vector is None or self.semantic is None:
            return lexical_hits  # the question has no vector: the words' ranking stands
        pool, after = lexical_hits[:HYBRID_POOL], lexical_hits[HYBRID_POOL:]
        words = {_key(r): r for r in pool}
        nearest_pool = HYBRID_POOL * window.DEEPER if dates else HYBRID_POOL
        sources = _VECTOR_SOURCES[scope]
        paired = self.semantic.pairs and (sources is None or pairs.MESSAGE in sources)
        # Every word hit weighed by its meaning too (memory/search/fusion.py). simple's notes
        # are embedded under a key of their content, not their name: they have meaning
        # only when among the nearest.
        if paired and sources is not None:
            sources = sources | {pairs.MESSAGE_NEXT}
        vector_hits = await self.semantic.index.search(
            session.user_id,
            session.agent_id,
            vector,
            sources=sources,
            limit=(nearest_pool + len(skip)) * (2 if paired else 1),
            also=list(words),
            partners=pairs.PARTNERS if paired else None,
        )
        vector_hits = [h for h in vector_hits if not turn.held(h.source, h.key, skip)]
        if paired:
            vector_hits = pairs.merged(vector_hits, unpaired)
        else:  # pairs embedded before `with_next` was turned off are not searched
            vector_hits = [h for h in vector_hits if h.source != pairs.MESSAGE_NEXT]
        # The turn's own items out, the pool stays HYBRID_POOL (a page's head, whatever the turn).
        nearest = sorted((h for h in vector_hits if h.nearest), key=lambda h: -h.score)[
            :nearest_pool
        ]
        meaning = await self._resolve_vectors(session, conv_ids, nearest, needles, dates)
        meaning = meaning[:HYBRID_POOL]
        # Every word hit outside the meaning list keeps its meaning: found by `also`, or
        # among the nearest asked but cut (a message's two vectors fill the nearest asked
        # twice over, and a window asks deeper) - else it would weigh as meaning nothing.
        listed = {_key(r) for r in meaning}
        similarity = {
            (h.source, h.key): h.score
            for h in vector_hits
            if (h.source, h.key) in words and (h.source, h.key) not in listed
        }
        # Far neighbours without a word of the question are no match (the floor's reason:
        # memory/search/semantic/__init__.py). They stay in the meaning scale, so no other item's
        # fused score moves: the floor only takes items off the list.
        floor = self.semantic.min_similarity
        far = {_key(r): r.score for r in meaning if r.score < floor and _key(r) not in words}
        meaning = [r for r in meaning if _key(r) not in far]
        found = {_key(r): r for r in meaning}
        found.update(words)  # their snippets centre on a word
        out = []
        for item in fuse(
            [(_key(r), r.score) for r in pool],
            [(_key(r), r.score) for r in meaning],
            SEMANTIC_WEIGHT_WITH_NEXT if paired else SEMANTIC_WEIGHT,
            similarity={**similarity, **far},
        ):
            result = found[item.key]
            result.score, result.signals = item.score, item.signals
            out.append(result)
        # Past the pool, words ranked lower than every fused word hit: below the fused
        # scale (score 0), in the words' order.
        for result in after:
            if _key(result) not in found:
                result.score = 0.0
                out.append(result)
        return out

    async def _resolve_vectors(
        self,
        session: Session,
        conv_ids: list[int],
        hits: list[VectorHit],
        needles: list[str],
        dates: window.Window = window.ANY_TIME,
    ) -> list[SearchResult]:
        """Semantic hits as results (score: cosine similarity), best first; rows outside
        `conv_ids` (the user's conversations) or `dates` are left out."""
        by_label = {index.label: index for index in self.indexes}
        mine = [h for h in hits if h.source in by_label]
        out: list[SearchResult] = []
        if mine:
            async with self.engine.connect() as conn:
                for label, index in by_label.items():
                    scored = [(h.key, h.score) for h in mine if h.source == label]
                    if scored:
                        out += await lexical.resolve_ids(
                            conn, index, conv_ids, scored, needles, dates
                        )
        others = [h for h in hits if h.source not in by_label]
        if others and self.extra is not None:
            out += dates.keep(await self.extra.resolve_extra(session, others, needles))
        return sorted(out, key=lambda r: r.score, reverse=True)

    async def _from_index(
        self,
        conn: AsyncConnection,
        index: TextIndex,
        conv_ids: list[int],
        text: str,
        terms: list[str],
        limit: int,
        dates: window.Window,
    ) -> list[SearchResult]:
        if terms:
            hits = await lexical.bm25(conn, index, conv_ids, terms, limit, dates)
            found = await lexical.resolve(conn, index, hits, terms)
            signal = WORDS
        else:
            hits, verify = await lexical.literal(conn, index, conv_ids, text, limit, dates)
            found = (await lexical.resolve(conn, index, hits, [text], verify))[:limit]
            signal = SUBSTRING
        for result in found:
            result.signals = (signal,)
        return found
