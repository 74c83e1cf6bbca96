"""A throwaway PostgreSQL cluster of our own, for tests that stop and restart the
database (the shared server on 5432 is never touched: other tests and other
processes use it)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import tempfile
from pathlib import Path

BIN = Path("/usr/lib/postgresql/15/bin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _as_postgres(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        "runuser",
        "-u",
        "postgres",
        "--",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])} failed: {out.decode()[-800:]}")


class OwnCluster:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="mnemo-pg-", dir="/tmp"))
        self.data = self.dir / "data"
        self.port = _free_port()

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    async def init(self) -> None:
        shutil.chown(self.dir, "postgres", "postgres")
        await _as_postgres(
            str(BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync"
        )
        await self.start()

    async def start(self) -> None:
        await _as_postgres(
            str(BIN / "pg_ctl"),
            "-D",
            str(self.data),
            "-w",
            "-l",
            str(self.dir / "log"),
            "-o",
            f"-p {self.port} -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off",
            "start",
        )

    async def stop(self, mode: str = "fast") -> None:
        await _as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-w", "-m", mode, "stop")

    async def destroy(self) -> None:
        with contextlib.suppress(RuntimeError):  # already stopped
            await self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


def available() -> bool:
    return (BIN / "initdb").exists() and shutil.which("runuser") is not None
