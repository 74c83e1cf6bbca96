"""What every `mnemo memory ...` command shares: opening the database and the provider,
the exit codes, the one-line error, dates as shown, and the first-Ctrl-C stop.

Every command opens the configured database, which must exist (bot.app.database_file),
migrating it as every start does, and the configured provider through the registry. Only
`compact` builds the full services (it needs the LLM for summaries); the others give the
provider a summarizer that refuses, so `doctor`, `export` or `backup` never need an API
key.

Output goes to stdout; progress and diagnostics to stderr. Exit codes: 0 done, 1 a fault
or failure (named on stderr), 2 bad usage, 3 the database missing or unreachable (the
CLI's; docs/OPERATIONS.md lists them). Stored text (titles, messages, ids of imported
sessions) is printed through `memory.text.display.terminal_safe`: its control and bidi
characters never act on the terminal; the JSON export escapes them losslessly.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memory.contract.types import Session, SummarizeOptions
from memory.text.display import terminal_safe

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from bot.config.settings import Settings
    from memory.contract.capabilities import Provider

EXIT_OK, EXIT_FAULT, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell counts it


class _NoSummarizer:
    """Read-only commands must never reach the LLM; if a provider tries, say so."""

    async def summarize(self, text: str, opts: SummarizeOptions) -> str:
        raise RuntimeError("this operator command does not summarize (use `mnemo memory compact`)")


@dataclass
class Opened:
    settings: Settings
    engine: AsyncEngine
    provider: Provider

    @property
    def where(self) -> str:
        """The database, as the operator recognises it (the SQLite file's path)."""
        from bot.app.database_file import describe

        return describe(self.settings.database.url)


@asynccontextmanager
async def open_memory(
    settings: Settings,
    *,
    with_llm: bool = False,
    create: bool = False,
    wrap_summarizer: Callable[[Any], Any] | None = None,
) -> AsyncIterator[Opened]:
    """The migrated database and the configured provider; closed on exit. The database
    must exist unless `create` (bot.app.database_file): DatabaseMissing otherwise. Each
    command names `Opened.where` in its result."""
    from bot.app.database_file import require_directory, require_existing

    url = settings.database.url
    if create:
        require_directory(url)
    else:
        await require_existing(url)
    if with_llm:
        from bot.app.services import build_services, build_summarizer
        from bot.model.client import LLMClient

        llm = LLMClient(settings.llm)
        summarizer = build_summarizer(llm, settings)
        if wrap_summarizer is not None:  # the operator's compaction counts its steps
            summarizer = wrap_summarizer(summarizer)
        services = await build_services(settings, llm=llm, summarizer=summarizer)
        try:
            yield Opened(settings, services.engine, services.provider)
        finally:
            await services.close()
        return
    from memory.contract.capabilities import ProviderContext
    from memory.contract.registry import create_provider_async
    from memory.storage.db import create_engine, migrate

    engine = create_engine(settings.database.url)
    try:
        await migrate(engine)
        ctx = ProviderContext(
            engine=engine,
            summarizer=_NoSummarizer(),
            agent_id=settings.agent.id,
            data_dir=Path(settings.data_dir),
            config=settings.provider_config(),
            max_facts=settings.memory.max_facts,
            embeddings_with_next=settings.embeddings.with_next,
        )
        provider = await create_provider_async(settings.memory.provider, ctx)
        try:
            yield Opened(settings, engine, provider)
        finally:
            await provider.close()
    finally:
        await engine.dispose()


def err(message: str) -> None:
    """One line on stderr, `mnemo: ...`, its control characters escaped."""
    print(f"mnemo: {terminal_safe(message)}", file=sys.stderr)


def when(value: Any) -> str:
    """A stored time as the commands show it; `-` for none."""
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


async def find_session(engine: AsyncEngine, session_id: str) -> Session | None:
    """The session `session_id` names, or None when there is none."""
    from memory.contract.errors import NotFound
    from memory.storage.history import HistoryStore

    try:
        info = await HistoryStore(engine).load_info(session_id)
    except NotFound:
        return None
    return Session(info.id, info.agent_id, info.user_id, info.channel)


class StopFlag:
    """Set by the first Ctrl-C of a long command (`stop_on_ctrl_c`); its steps look at
    it before starting the next one."""

    stop = False


@contextmanager
def stop_on_ctrl_c(steps: StopFlag, what: str) -> Iterator[None]:
    """The first Ctrl-C asks for a stop after the current step (said once on stderr);
    a second one stops at once (KeyboardInterrupt, exit 130)."""
    import signal

    loop = asyncio.get_running_loop()

    def first() -> None:
        steps.stop = True
        loop.remove_signal_handler(signal.SIGINT)
        print(
            f"\nmnemo: stopping after the current {what}; what is done is kept "
            "(Ctrl-C again stops at once)",
            file=sys.stderr,
        )

    try:
        loop.add_signal_handler(signal.SIGINT, first)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)
