"""A TCP relay between the bot and a fake server that can drop every connection on
demand, or refuse new ones for a while: the network failing under a running bot.

    async with FaultProxy(port) as proxy:   # proxy.port forwards to 127.0.0.1:port
        proxy.drop_all()                    # every open connection is cut now
        proxy.refusing = True               # new connections are closed on accept
"""

from __future__ import annotations

import asyncio
import contextlib


class FaultProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.refusing = False
        self.dropped = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.drop_all()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def url(self, scheme_path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{scheme_path}"

    def drop_all(self) -> None:
        for writer in list(self._writers):
            self.dropped += 1
            writer.transport.abort()  # a reset, not a polite close
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(OSError):
                dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        self._writers.difference_update((writer, up_writer))
