"""`mnemo run` as a real subprocess against the fake servers (crash trials, logs).

proc = BotProcess(tmp_path, settings_dict)
await proc.start()          # returns once the bot polls getUpdates
proc.kill()                 # SIGKILL, no cleanup of any kind
await proc.stop()           # SIGTERM, a clean stop
proc.stderr_text()          # everything the process logged
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.fakes.telegram_server import FakeTelegram
from tests.waits import scaled

REPO = Path(__file__).resolve().parents[2]


def write_config(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    return path


class BotProcess:
    def __init__(self, workdir: Path, config: dict[str, Any], tg: FakeTelegram) -> None:
        self.workdir = workdir
        self.config_path = write_config(workdir / "config.yaml", config)
        self.tg = tg
        self.log_path = workdir / "bot.log"
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0

    async def start(self, within: float = 30.0) -> None:
        """Start the bot and wait until it polls for updates (or fail with its log after
        `within` seconds, scaled to the machine's load: tests/waits.py)."""
        polls = len(self.tg.calls_to("getUpdates"))
        log = self.log_path.open("ab")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("MNEMO_CONFIG", None)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bot.cli",
                "--config",
                str(self.config_path),
                "run",
                cwd=self.workdir,
                stdout=log,
                stderr=log,
                env=env,
            )
        finally:
            log.close()
        self.starts += 1
        proc = self.proc

        # Polled, not tg.wait_for: a bot that dies makes no API call to wake a waiter.
        limit = scaled(within)
        deadline = asyncio.get_running_loop().time() + limit
        while len(self.tg.calls_to("getUpdates")) <= polls:
            if proc.returncode is not None:
                raise AssertionError(
                    f"the bot exited with {proc.returncode}:\n{self.stderr_text()[-3000:]}"
                )
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(
                    f"the bot did not poll within {limit:.0f}s ({within}s scaled):\n{self.stderr_text()[-3000:]}"
                )
            await asyncio.sleep(0.02)

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)

    async def wait(self) -> int:
        assert self.proc is not None
        return await self.proc.wait()

    async def stop(self, within: float = 20.0) -> int:
        """SIGTERM and wait for a clean exit (SIGKILL if it hangs past `within` s, scaled)."""
        if self.proc is None:
            return 0
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return await asyncio.wait_for(self.proc.wait(), scaled(within))
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
                raise AssertionError("the bot did not stop on SIGTERM") from None
        return self.proc.returncode

    def stderr_text(self) -> str:
        if not self.log_path.exists():
            return ""
        return self.log_path.read_bytes().decode("utf-8", "replace")
