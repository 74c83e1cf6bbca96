"""Starting the console with the health server (`mnemo run`, bot/app/root.py).

One aiohttp server per address: when `web.listen`/`web.port` equal `health.*` (the
default port), the console and `/healthz` + `/metrics` share one server and one port;
otherwise each gets its own, so a console kept on 127.0.0.1 is never published by a
health endpoint that listens on 0.0.0.0 for Prometheus.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from bot.config.settings import HealthSettings, Settings
from bot.runtime.health import HealthServer

log = logging.getLogger(__name__)


class Servers:
    def __init__(self, servers: list[HealthServer]) -> None:
        self.servers = servers

    async def stop(self) -> None:
        for server in self.servers:
            await server.stop()


async def start_http(settings: Settings, engine: Any, memory: Any, **info: Any) -> Servers | None:
    """The health endpoint and the console (over `memory`, the provider) as configured;
    None when neither is on. `info` goes into `/healthz`."""
    health, web = settings.health, settings.web
    console = None
    if web.enabled:
        from bot.web.console import Console

        console = Console(settings, engine, memory)
        _warn(settings)
    shared = health.enabled and (health.listen, health.port) == (web.listen, web.port)
    servers: list[HealthServer] = []
    if health.enabled:
        servers.append(HealthServer(engine, health, info=info, console=console if shared else None))
    if console is not None and not shared:
        own = HealthSettings(enabled=False, listen=web.listen, port=web.port)
        servers.append(HealthServer(engine, own, console=console))
    started = Servers([])
    try:
        for server in servers:
            await server.start()
            started.servers.append(server)
    except BaseException:
        await started.stop()
        raise
    return started if servers else None


def _warn(settings: Settings) -> None:
    web = settings.web
    if not web.operators:
        log.warning("web console enabled with no web.operators: nobody can log in")
    try:
        local = ipaddress.ip_address(web.listen).is_loopback
    except ValueError:
        local = web.listen == "localhost"
    if not local and not web.secure_cookies:
        log.warning(
            "web console listens on %s without web.secure_cookies: serve it through an "
            "HTTPS reverse proxy (docs/OPERATIONS.md)",
            web.listen,
        )
