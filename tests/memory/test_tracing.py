"""with_tracing / unwrap: same capabilities as the inner provider, every call recorded."""

from __future__ import annotations

import logging

import pytest

from memory.contract.capabilities import (
    CAPABILITIES,
    Compactor,
    Explorer,
    Provider,
    Searcher,
    capabilities_of,
)
from memory.contract.context import with_session_id
from memory.contract.errors import NotFound
from memory.contract.tracing import TraceEvent, payload_size, unwrap, with_tracing
from memory.contract.types import (
    CompactionMode,
    CompactionResult,
    Message,
    SearchQuery,
    SearchResult,
    Session,
    SessionStats,
)

S = Session("s1", "bot", 7)


class CoreOnly:
    name = "core"

    def __init__(self) -> None:
        self.log: list[Message] = []
        self.closed = 0

    async def bootstrap(self, session: Session) -> None:
        return None

    async def append(self, session: Session, *msgs: Message) -> None:
        self.log.extend(msgs)

    async def assemble(self, session: Session, budget: int, fresh_tail: int) -> list[Message]:
        return list(self.log)

    async def stats(self, session: Session) -> SessionStats:
        return SessionStats(message_count=len(self.log))

    async def close(self) -> None:
        self.closed += 1

    def extra(self) -> str:  # a plugin's own method, not part of the contract
        return "extra"


class Searching(CoreOnly):
    name = "searching"

    async def search(self, session: Session, query: SearchQuery) -> list[SearchResult]:
        if query.text == "boom":
            raise NotFound("nothing here")
        return [SearchResult("message", "m1", f"about {query.text}", 1.5)]

    # Half of Explorer only: neither this nor its wrapper is an Explorer.
    async def describe(self, summary_id: str, session: Session | None) -> None:
        return None


class Compacting(Searching):
    name = "compacting"

    async def needs_compaction(self, session: Session, threshold: int) -> bool:
        return True

    async def compact(self, session: Session, mode: CompactionMode) -> CompactionResult:
        return CompactionResult(leaf_summaries_created=1, summary="abc")


@pytest.mark.parametrize("cls", [CoreOnly, Searching, Compacting])
def test_capabilities_are_exactly_the_inner_ones(cls: type) -> None:
    inner = cls()
    traced = with_tracing(inner, lambda e: None)
    assert isinstance(traced, Provider)
    for proto in CAPABILITIES.values():
        assert isinstance(traced, proto) == isinstance(inner, proto), proto
    assert capabilities_of(traced) == capabilities_of(inner)
    assert traced.name == inner.name
    assert not hasattr(traced, "extra") and not hasattr(traced, "describe")


def test_specific_capability_answers() -> None:
    traced = with_tracing(Searching(), lambda e: None)
    assert isinstance(traced, Searcher)
    assert not isinstance(traced, Compactor)
    assert not isinstance(traced, Explorer)


def test_unwrap_returns_the_innermost() -> None:
    inner = Compacting()
    twice = with_tracing(with_tracing(inner, lambda e: None), lambda e: None)
    assert unwrap(twice) is inner
    assert unwrap(inner) is inner
    assert isinstance(twice, Compactor)
    assert unwrap(twice).extra() == "extra"


async def test_events_record_operation_sizes_and_session() -> None:
    events: list[TraceEvent] = []
    inner = Searching()
    traced = with_tracing(inner, events.append)
    await traced.append(S, Message("user", "hello"), Message("assistant", "hi!"))
    hits = await traced.search(S, SearchQuery("cats"))
    assert hits[0].content == "about cats"
    with with_session_id("ctx-session"):
        await traced.close()
    assert [e.operation for e in events] == ["append", "search", "close"]
    append, search, close = events
    assert append.arg_size == len("hello") + len("hi!") and append.result_size == 0
    assert search.arg_size == len("cats") + len("both") + len("full_text")
    assert search.result_size == payload_size(hits) > 0
    assert append.session_id == "s1" and close.session_id == "ctx-session"
    assert all(e.ok and e.duration_s >= 0 and e.provider == "searching" for e in events)
    assert inner.closed == 1 and len(inner.log) == 2


async def test_errors_propagate_unchanged_and_are_recorded() -> None:
    events: list[TraceEvent] = []
    traced = with_tracing(Searching(), events.append)
    with pytest.raises(NotFound, match="nothing here"):
        await traced.search(S, SearchQuery("boom"))
    assert events[-1].operation == "search" and events[-1].error == "NotFound"
    assert not events[-1].ok


async def test_failing_hook_is_swallowed_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    def bad_hook(event: TraceEvent) -> None:
        raise RuntimeError("hook broke")

    traced = with_tracing(Compacting(), bad_hook)
    with caplog.at_level(logging.WARNING, logger="memory.contract.tracing"):
        result = await traced.compact(S, CompactionMode.FULL)
    assert result.summary == "abc"
    assert "trace hook failed on compact" in caplog.text
