"""The application root: the one place that starts mnemo, runs its channels and stops it
(`mnemo run` with the configured channels, bot.app.run; `mnemo chat` with the terminal;
`mnemo reflect` with none).

`Root(settings, channels).run()`, in order:
1. SIGINT and SIGTERM set the stop event (from the first moment: a stop during start-up
   is honoured as soon as start-up is over, and the channels then end at once);
2. the services (`bot.app.services.build_services`: migrations, provider, LLM client, conversations);
3. the scheduler (`bot.runtime.scheduler`, one per process) with the embeddings worker's
   polling and every background job it is given (`Job`; by default
   `bot.app.services.background_jobs`: reflect, `reflect.*`, and retention,
   `memory.retention.*`);
4. the health/metrics server, when `health.enabled`, the web console, when
   `web.enabled` (bot/web/), and the MCP endpoint, when `mcp.enabled` (bot/mcp/), if
   the command serves them;
5. the channels, each built from the services, until the stop event, or until one ends
   by itself (the terminal at end of input) or fails (its error ends the run).
At the stop, at once: the channels finish what is in flight (each its own drain) while
the background jobs get `JOB_GRACE_S`, then are cancelled; then the health server stops,
and last the services close (conversations, turn locks, provider, LLM client, database engine).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from bot.app.services import Job, Services, background_jobs, build_services
from bot.channels.base import Channel, ChannelFactory
from bot.config.settings import Settings
from bot.runtime.scheduler import Scheduler

log = logging.getLogger(__name__)

JOB_GRACE_S = 2.0  # a background job in flight at a stop (docker stop waits 10 s in all)
SIGNALS = (signal.SIGINT, signal.SIGTERM)

Build = Callable[[Settings], Awaitable[Services]]


async def start_mcp(settings: Settings, engine: Any, conversations: Any) -> Any:
    """The per-user MCP endpoint on its own port (bot/mcp/server.py), its tools run as
    the token owner's `/memory` sub-commands."""
    try:
        from bot.mcp.server import McpEndpoint
    except ImportError as exc:  # the `mcp` extra is not installed
        raise RuntimeError(
            f"mcp.enabled needs the MCP SDK: pip install 'mnemo[mcp]' ({exc})"
        ) from None
    from bot.conversation.commands import handle_command
    from bot.mcp.access import AccessStore
    from bot.mcp.server import MAX_REPLY

    async def run(session: Any, words: str) -> str:
        return await handle_command(
            conversations, session, "memory", words, is_admin=False, limit=MAX_REPLY
        )

    endpoint = McpEndpoint(AccessStore(engine), run, settings.mcp)
    await endpoint.start()
    return endpoint


class Root:
    """Runs `channels` (factories: `Services` -> `Channel`) on one set of services.

    `health`: serve `/healthz` and `/metrics` when `health.enabled` (`mnemo run`; not
    `mnemo chat`, which would take the running bot's port). `jobs`: what is started on
    the scheduler (default: `background_jobs(reflect=reflect)`; reflect schedules
    itself only when `reflect.enabled`). `build`: how the services are built (tests
    inject clients).
    """

    def __init__(
        self,
        settings: Settings,
        channels: Sequence[ChannelFactory] = (),
        *,
        health: bool = True,
        reflect: bool = True,
        jobs: Sequence[Job] | None = None,
        build: Build = build_services,
    ) -> None:
        self.settings = settings
        self.factories = tuple(channels)
        self.serve_health = health
        self.jobs = tuple(background_jobs(reflect=reflect) if jobs is None else jobs)
        self.build = build
        self.stopping = asyncio.Event()
        self.signalled: signal.Signals | None = None  # the signal that stopped it, if one
        self.services: Services | None = None
        self.scheduler = Scheduler()
        self.health: Any = None
        self.mcp: Any = None
        self.channels: list[Channel] = []

    def stop(self) -> None:
        """Ask for a clean stop (what SIGINT and SIGTERM do)."""
        self.stopping.set()

    def _on_signal(self, sig: signal.Signals) -> None:
        self.signalled = self.signalled or sig
        self.stop()

    async def run(self) -> int:
        """Start, serve until stopped, stop; the channels' exit code (the highest)."""
        with self._signals():
            async with self.started():
                return await self._serve()

    @contextlib.contextmanager
    def _signals(self) -> Any:
        loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            yield
        finally:
            for sig in SIGNALS:
                loop.remove_signal_handler(sig)

    @contextlib.asynccontextmanager
    async def started(self) -> AsyncIterator[Services]:
        """Services, background jobs and the health server for the block; stopped in
        order at its end (also when starting fails half-way)."""
        services = self.services = await self.build(self.settings)
        try:
            self._schedule(services)
            self.scheduler.start()
            if self.serve_health:
                from bot.web.serve import start_http

                self.health = await start_http(
                    self.settings,
                    services.engine,
                    services.provider,
                    provider=self.settings.memory.provider,
                )
            if self.serve_health and self.settings.mcp.enabled:
                self.mcp = await start_mcp(self.settings, services.engine, services.conversations)
            yield services
        finally:
            # Jobs use the conversation service and the provider: ended before those close.
            await self.scheduler.stop(JOB_GRACE_S)
            if self.mcp is not None:
                await self.mcp.stop()
            if self.health is not None:
                await self.health.stop()
            await services.close()

    def _schedule(self, services: Services) -> None:
        if services.embedding_worker is not None:
            services.embedding_worker.start(self.scheduler)
        for start in self.jobs:
            start(self.scheduler, services)

    async def _serve(self) -> int:
        assert self.services is not None
        services = self.services
        self.channels = [make(services) for make in self.factories]
        runs = [
            asyncio.create_task(channel.run(self.stopping), name=f"channel-{channel.name}")
            for channel in self.channels
        ]
        stopped = asyncio.create_task(self.stopping.wait())
        try:
            await asyncio.wait({stopped, *runs}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.stop()  # one channel ending (or failing) ends them all
            stopped.cancel()
            # Background jobs wind down while the channels drain: both within docker
            # stop's 10 s.
            jobs = asyncio.create_task(self.scheduler.stop(JOB_GRACE_S))
            results = await asyncio.gather(*runs, return_exceptions=True)
            await jobs
        codes = []
        for result in results:
            if isinstance(result, BaseException):
                raise result
            codes.append(result)
        return max(codes, default=0)
