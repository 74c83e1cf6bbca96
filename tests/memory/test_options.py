"""The contract's options reach the provider: `memory.contract.options.append_messages`
passes them through tracing, and store writes record who made them."""

from __future__ import annotations

from memory.contract.options import AppendOptions, append_messages
from memory.contract.tracing import with_tracing
from memory.contract.types import Message, Session, SessionStats

S = Session("s1", "agent", 1, "test")


class StoringProvider:
    name = "storing"

    def __init__(self) -> None:
        self.stored: list[str] = []

    async def bootstrap(self, session: Session) -> None:
        return None

    async def append(
        self, session: Session, *msgs: Message, options: AppendOptions | None = None
    ) -> None:
        self.stored += [m.content for m in msgs]

    async def assemble(self, session: Session, budget: int, fresh_tail: int) -> list[Message]:
        return []

    async def stats(self, session: Session) -> SessionStats:
        return SessionStats()

    async def close(self) -> None:
        return None


class CurrentProvider(StoringProvider):
    name = "current"

    def __init__(self) -> None:
        super().__init__()
        self.options: list[AppendOptions | None] = []

    async def append(
        self, session: Session, *msgs: Message, options: AppendOptions | None = None
    ) -> None:
        self.options.append(options)
        await super().append(session, *msgs)


async def test_a_current_append_gets_the_options_through_tracing() -> None:
    inner = CurrentProvider()
    options = AppendOptions(live_only=True)
    await append_messages(
        with_tracing(inner, lambda event: None), S, [Message("user", "x")], options
    )
    assert inner.options == [options] and inner.stored == ["x"]


async def test_memory_writes_record_who_made_them_not_the_context(
    engine,
    tmp_path,  # noqa: ANN001
) -> None:
    """The memory tool and /memory pass the writer explicitly (`WriteOptions`): the
    changelog says agent for the model, user for /memory, reflect for reflect, whatever
    change source the surrounding context carries."""
    from memory.actions.commands import run_memory_command
    from memory.actions.tool import run_tool
    from memory.compaction.summarizer import TruncatingSummarizer
    from memory.contract.capabilities import ProviderContext
    from memory.contract.context import with_change_source
    from memory.contract.registry import create_provider
    from memory.contract.types import ChangeSource

    ctx = ProviderContext(engine=engine, summarizer=TruncatingSummarizer(), config={"keep_tail": 4})
    provider = create_provider("lcm", ctx)
    session = Session("duties:1", "default", 7, "test")
    try:
        await provider.bootstrap(session)
        with with_change_source(ChangeSource.SYSTEM):
            await run_tool(
                provider,
                session,
                {"action": "constraint_add", "text": "be brief"},
                source=ChangeSource.AGENT,
            )
            await run_tool(
                provider,
                session,
                {"action": "constraint_add", "text": "be kind"},
                source=ChangeSource.REFLECT,
            )
            await run_memory_command(provider, session, "constrain be calm", is_admin=False)
        entries = await provider.read_changelog(7, "default", "constraint")
        sources = {e.after_text.rsplit("be ", 1)[-1].split('"')[0]: e.source for e in entries}
        assert sources == {"brief": "agent", "kind": "reflect", "calm": "user"}, sources
        assert {e.session_id for e in entries} == {session.id}
    finally:
        await provider.close()
