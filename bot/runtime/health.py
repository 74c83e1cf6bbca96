"""The operator's HTTP endpoint: `/healthz` and `/metrics` (Prometheus text format).

Served by aiohttp inside the bot's own event loop, so `/healthz` awaits a real `SELECT 1`
on the same engine the bot uses (prometheus_client's bundled server runs in a thread
and could not await the async engine). `mnemo run` starts it when `health.enabled`.

`/healthz` answers 200 with a small JSON body when the database answers within
`CHECK_TIMEOUT_S`, 503 otherwise; the body never carries the database URL (it may hold a
password), only the error class.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config.settings import HealthSettings
from bot.runtime.metrics import REGISTRY

log = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 2.0


async def check_database(engine: AsyncEngine, timeout_s: float = CHECK_TIMEOUT_S) -> str | None:
    """None when the database answers `SELECT 1` in time, else why not (one line)."""
    try:
        async with asyncio.timeout(timeout_s):
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
    except TimeoutError:
        return f"no answer within {timeout_s:g}s"
    except Exception as exc:  # any failure means "unhealthy", never a crashed endpoint
        return type(exc).__name__
    return None


class HealthServer:
    """`/healthz` and `/metrics` on `listen:port`; `start()` / `stop()` (or `async with`).

    Port 0 picks a free port; `port` tells which one after `start()`.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        settings: HealthSettings,
        *,
        info: dict[str, Any] | None = None,
        console: Any = None,
    ) -> None:
        """`console`: the web console (bot/web/) served on the same address, or None."""
        self.engine = engine
        self.settings = settings
        self.info = dict(info or {})
        self.console = console
        self.port = settings.port
        self._runner: web.AppRunner | None = None
        self._started = time.monotonic()

    def app(self) -> web.Application:
        # Forms only: a login, a rollback, an operator's edit of a profile (its text twice).
        app = web.Application(client_max_size=512 * 1024)
        if self.settings.enabled:
            app.router.add_get("/healthz", self._healthz)
            app.router.add_get("/metrics", self._metrics)
        if self.console is not None:
            self.console.install(app)
        return app

    async def _healthz(self, _request: web.Request) -> web.Response:
        problem = await check_database(self.engine)
        body = {
            **self.info,
            "status": "ok" if problem is None else "unavailable",
            "database": "ok" if problem is None else problem,
            "uptime_s": round(time.monotonic() - self._started, 1),
        }
        return web.json_response(body, status=200 if problem is None else 503)

    async def _metrics(self, _request: web.Request) -> web.Response:
        # generate_latest walks the registry synchronously: fast, no I/O.
        return web.Response(
            body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def start(self) -> None:
        if self._runner is not None:
            return
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.settings.listen, self.settings.port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        sockets = getattr(site._server, "sockets", None) or []  # noqa: SLF001 - aiohttp exposes no public getter
        if sockets:
            self.port = sockets[0].getsockname()[1]
        served = ["/healthz, /metrics"] if self.settings.enabled else []
        if self.console is not None:
            served.append("the web console")
        log.info(
            "http endpoint on http://%s:%d (%s)", self.settings.listen, self.port, "; ".join(served)
        )

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> HealthServer:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()


async def start_health_server(
    engine: AsyncEngine, settings: HealthSettings, **info: Any
) -> HealthServer | None:
    """Start the endpoint when `settings.enabled`; None otherwise. The caller stops it."""
    if not settings.enabled:
        return None
    server = HealthServer(engine, settings, info=info)
    await server.start()
    return server
