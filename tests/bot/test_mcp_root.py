"""`mnemo run` with `mcp.enabled` (bot.app.root.Root): the MCP endpoint comes up on its
own port with the services, answers the SDK's client for a token's owner, and a SIGTERM
still stops everything cleanly (uvicorn takes no signal of the root's), the port closed."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from pathlib import Path

from bot.app.root import Root
from bot.app.services import Services
from bot.channels.base import Channel
from bot.mcp.access import AccessStore
from tests.bot.test_root import ALICE, FakeChannel, lcm_settings
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import free_port
from tests.telegram.test_mcp_endpoint import _call


async def test_run_serves_the_mcp_endpoint_and_a_sigterm_stops_it(
    llm_server: FakeOpenAI, tmp_path: Path
) -> None:
    port = free_port()
    made: list[FakeChannel] = []
    built = asyncio.Event()

    def fake(services: Services) -> Channel:
        made.append(FakeChannel(services))
        built.set()
        return made[-1]

    settings = lcm_settings(llm_server, tmp_path, mcp={"enabled": True, "port": port})
    root = Root(settings, [fake], reflect=False)
    run = asyncio.create_task(root.run())
    async with asyncio.timeout(60):
        await built.wait()  # once the services (and the endpoint) are up
        channel = made[0]
        await channel.running.wait()
        channel.inbox.put_nowait("the lemon tart recipe")
        await channel.replies.get()
        assert root.services is not None
        store = AccessStore(root.services.engine)
        issued = await store.issue(ALICE.user_id, ALICE.agent_id, ALICE.channel, 600)
        url = f"http://127.0.0.1:{port}/mcp"
        failed, found = await _call(url, issued.token, "search", query="lemon tart")
        assert not failed and "the lemon tart recipe" in found, found

        os.kill(os.getpid(), signal.SIGTERM)  # the root's handler, not uvicorn's
        assert await run == 0
    with socket.socket() as s:  # the endpoint's port is free again
        s.bind(("127.0.0.1", port))
