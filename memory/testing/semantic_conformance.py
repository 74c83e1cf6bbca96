"""The conformance kit's hybrid-search part: any provider that takes an embedder
(`ProviderContext.embedder`) is held to the same rules as lcm and simple.

Subclass `SemanticConformance` (class name starting with `Test`) and give two fixtures:
`embedder`, an `Embedder` on a server you control (a fake is fine: texts sharing words
must be close), and `make_provider(embedder)`, which returns a bootstrapped-capable
provider on the test's database built with that embedder (or with None: embeddings off).
The provider must expose `embedding_sources()` so `embed_backlog` can fill its vectors.

The rules: with embeddings off, `hybrid` returns what `full_text` returns; with them on,
a hit found by words and meaning says so; what is not embedded yet is still found by
its words ("half backfilled"); hostile text never raises; another user's items never
come back; the first n hits of a search for m > n are the search for n, also past the
fusion's pool (memory/search/recall.py's HYBRID_POOL).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from memory.contract.capabilities import Provider
from memory.contract.types import Message, SearchMode, SearchQuery, Session, utcnow
from memory.search.recall import HYBRID_POOL
from memory.search.semantic.backlog import embed_backlog
from memory.search.semantic.client import Embedder
from memory.testing.conformance import HOSTILE_PATTERNS

HYBRID, FULL_TEXT = SearchMode.HYBRID, SearchMode.FULL_TEXT
DAY = timedelta(days=1)


class SemanticConformance:
    user_id = 3001
    other_user_id = 3002

    def session(self, user_id: int | None = None) -> Session:
        uid = self.user_id if user_id is None else user_id
        return Session(f"semantic:{uid}:{uuid.uuid4().hex[:8]}", user_id=uid, channel="test")

    async def _stored(self, provider: Provider, session: Session) -> None:
        await provider.bootstrap(session)
        await provider.append(
            session, *(Message(role="user", content=f"small talk number {i}") for i in range(8))
        )
        await provider.append(
            session,
            Message(role="user", content="the lighthouse keeper retired in spring"),
            Message(role="assistant", content="a quiet life by the sea"),
        )

    async def test_off_hybrid_is_full_text(self, make_provider: Callable[..., Any]) -> None:
        provider = make_provider(None)
        s = self.session()
        await self._stored(provider, s)
        for text in ("lighthouse keeper", "When did the keeper retire?"):
            words = await provider.search(s, SearchQuery(text, mode=FULL_TEXT))
            hybrid = await provider.search(s, SearchQuery(text, mode=HYBRID))
            assert [h.content for h in hybrid] == [h.content for h in words], text

    async def test_on_a_hit_found_both_ways_says_so(
        self, make_provider: Callable[..., Any], embedder: Embedder
    ) -> None:
        provider = make_provider(embedder)
        s = self.session()
        await self._stored(provider, s)
        await embed_backlog(provider, embedder)
        hits = await provider.search(s, SearchQuery("lighthouse keeper", mode=HYBRID))
        assert hits and hits[0].content.startswith("the lighthouse keeper retired")
        assert set(hits[0].signals) == {"words", "meaning"}
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)

    async def test_half_backfilled_new_items_are_found_by_words(
        self, make_provider: Callable[..., Any], embedder: Embedder
    ) -> None:
        provider = make_provider(embedder)
        s = self.session()
        await self._stored(provider, s)
        await embed_backlog(provider, embedder)
        await provider.append(s, Message(role="user", content="a zeppelin flew over the town"))
        hits = await provider.search(s, SearchQuery("zeppelin", mode=HYBRID))
        assert hits and hits[0].content == "a zeppelin flew over the town"

    async def test_hostile_text_and_other_users(
        self, make_provider: Callable[..., Any], embedder: Embedder
    ) -> None:
        provider = make_provider(embedder)
        mine, theirs = self.session(), self.session(self.other_user_id)
        await self._stored(provider, theirs)
        await provider.bootstrap(mine)
        await provider.append(mine, Message(role="user", content="nothing to see"))
        await embed_backlog(provider, embedder)
        for pattern in HOSTILE_PATTERNS:
            assert isinstance(await provider.search(mine, SearchQuery(pattern, mode=HYBRID)), list)
        hits = await provider.search(mine, SearchQuery("lighthouse keeper", mode=HYBRID))
        assert all(h.session_id in ("", mine.id) for h in hits)
        assert not any("lighthouse" in h.content for h in hits)

    async def test_a_date_range_holds_for_meaning_too(
        self, make_provider: Callable[..., Any], embedder: Embedder
    ) -> None:
        """A hybrid search within dates: what is near in meaning but outside the range
        is no hit, what is inside is found both ways."""
        provider = make_provider(embedder)
        s = self.session()
        await provider.bootstrap(s)
        then = utcnow() - timedelta(days=60)
        await provider.append(
            s,
            Message(role="user", content="the lighthouse keeper retired", created_at=then),
            Message(role="user", content="the lighthouse keeper came back", created_at=utcnow()),
        )
        await embed_backlog(provider, embedder)
        text = "lighthouse keeper"
        q = SearchQuery(text, mode=HYBRID, since=then - timedelta(days=1), before=then + DAY)
        hits = await provider.search(s, q)
        assert [h.content for h in hits] == ["the lighthouse keeper retired"]
        assert set(hits[0].signals) == {"words", "meaning"}
        recent = await provider.search(s, SearchQuery(text, mode=HYBRID, since=then + DAY))
        assert [h.content for h in recent] == ["the lighthouse keeper came back"]

    async def test_ranking_does_not_depend_on_limit(
        self, make_provider: Callable[..., Any], embedder: Embedder
    ) -> None:
        provider = make_provider(embedder)
        s = self.session()
        await provider.bootstrap(s)
        # More word hits and more neighbours than the fusion's pool, with ties.
        texts = [f"the harbour ferry left at {i % 7} o'clock" for i in range(HYBRID_POOL + 10)]
        texts += [f"ferry tickets, harbour fees and pier {i}" for i in range(HYBRID_POOL // 2)]
        texts += [f"lunch by the pier number {i}" for i in range(HYBRID_POOL // 2)]
        await provider.append(s, *(Message(role="user", content=t) for t in texts))
        await embed_backlog(provider, embedder)
        for text in ("harbour ferry", "when did the ferry leave the pier?"):
            everything = await provider.search(s, SearchQuery(text, mode=HYBRID, limit=200))
            keys = [(h.source_type, h.source_id) for h in everything]
            assert len(keys) > HYBRID_POOL + 10, text
            assert any("meaning" in h.signals for h in everything), text
            for n in (1, 3, 10, HYBRID_POOL - 1, HYBRID_POOL + 5, len(keys) - 1):
                page = await provider.search(s, SearchQuery(text, mode=HYBRID, limit=n))
                assert [(h.source_type, h.source_id) for h in page] == keys[:n], (text, n)
