"""Load: N concurrent chats x M messages through the real bot (`mnemo run`, lcm) against
the fake Bot API and the instant fake model (echo), both in this process on loopback.

Round r: every chat sends its r-th message at once; the round ends when every chat has
its answer. Checked: no error reply, every message answered exactly once and stored once
(N x M user messages + N x M answers in the database). Sampled every 0.25 s from
/proc: the bot's RSS and open file descriptors; they must stay bounded (the figures are
recorded, not asserted). The slow test tests/reliability/test_load.py runs a smaller
load through the same code and asserts correctness only.

    .venv/bin/python bench/load_chats.py [--chats 1000] [--messages 5]
        [--db sqlite|postgres] [--append-results]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import sqlalchemy as sa  # noqa: E402

from bench._common import append_results, machine  # noqa: E402
from memory.storage.db import create_engine  # noqa: E402
from memory.storage.history import conversations, messages  # noqa: E402
from memory.testing.databases import temp_database_url  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402
from tests.fakes.telegram_server import FakeTelegram  # noqa: E402
from tests.reliability.process import BotProcess  # noqa: E402

FIRST_CHAT = 10_000


@dataclass
class LoadResult:
    chats: int
    messages: int
    db: str
    seconds: float = 0.0
    answered: int = 0
    errors: list[str] = field(default_factory=list)
    stored_user: int = 0
    stored_assistant: int = 0
    rss_mb: list[float] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        total = self.chats * self.messages
        return (
            not self.errors
            and self.answered == total
            and self.stored_user == total
            and self.stored_assistant == total
        )


def _sample(pid: int) -> tuple[float, int]:
    rss = 0.0
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def _config(workdir: Path, tg: FakeTelegram, llm: FakeOpenAI, url: str) -> dict[str, Any]:
    return {
        "database": {"url": url},
        "data_dir": str(workdir / "data"),
        "llm": {
            "base_url": llm.base_url,
            "api_key": "bench-key",
            "timeout_s": 30,
            "max_retries": 2,
        },
        "telegram": {"token": tg.token, "base_url": tg.base_url},
        "memory": {"provider": "lcm"},
        "reflect": {"enabled": False},
        "log_level": "WARNING",
    }


async def run_load(chats: int, per_chat: int, db: str, workdir: Path) -> LoadResult:
    result = LoadResult(chats, per_chat, db)
    async with FakeTelegram() as tg, FakeOpenAI() as llm, temp_database_url(db, workdir) as url:
        bot = BotProcess(workdir, _config(workdir, tg, llm, url), tg)
        await bot.start()
        assert bot.proc is not None
        pid = bot.proc.pid
        stop = asyncio.Event()

        async def sampler() -> None:
            while not stop.is_set():
                rss, fds = _sample(pid)
                result.rss_mb.append(rss)
                result.fds.append(fds)
                await asyncio.sleep(0.25)

        sampling = asyncio.create_task(sampler())
        started = time.monotonic()
        try:
            for r in range(per_chat):
                for c in range(chats):
                    tg.private(FIRST_CHAT + c).send(f"load {r} from {c}")
                want = chats * (r + 1)
                deadline = time.monotonic() + 120
                while True:
                    texts = [m.text for m in tg._bot_messages.values()]
                    done = sum(t.startswith("echo: load ") for t in texts)
                    result.errors = [t for t in texts if not t.startswith("echo: load ")]
                    if done >= want or result.errors:
                        break
                    if time.monotonic() > deadline:
                        result.errors.append(f"round {r}: {done} of {want} answered in 120 s")
                        break
                    await asyncio.sleep(0.1)
                if result.errors:
                    break
            result.seconds = time.monotonic() - started
            answers = [m.text for m in tg._bot_messages.values()]
            result.answered = len(set(answers)) if len(set(answers)) == len(answers) else -1
        finally:
            stop.set()
            await sampling
            await bot.stop(within=60)
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                rows = (
                    await conn.execute(
                        sa.select(messages.c.role, sa.func.count())
                        .join(conversations, conversations.c.id == messages.c.conversation_id)
                        .group_by(messages.c.role)
                    )
                ).all()
        finally:
            await engine.dispose()
        counts = dict(rows)
        result.stored_user = counts.get("user", 0)
        result.stored_assistant = counts.get("assistant", 0)
    return result


def _report(r: LoadResult, command: str) -> str:
    total = r.chats * r.messages
    return "\n".join(
        [
            f"## Load: {r.chats} concurrent chats x {r.messages} messages ({r.db})",
            "",
            f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
            f"- machine: {machine()}; load average at the end {os.getloadavg()[0]:.1f}"
            " (shared machine)",
            f"- command: `{command}`",
            "- setup: `mnemo run` subprocess, lcm provider, fake Bot API + instant echo model in"
            " the bench process; every chat sends its next message in the same round",
            "",
            "| chats | messages | db | ok | answered | stored user/assistant | errors | seconds |"
            " msg/s | RSS start→peak→end MB | fds start→peak→end |",
            "|---:|---:|---|---|---:|---:|---:|---:|---:|---|---|",
            f"| {r.chats} | {total} | {r.db} | {'yes' if r.ok else 'NO'} | {r.answered} |"
            f" {r.stored_user}/{r.stored_assistant} | {len(r.errors)} | {r.seconds:.1f} |"
            f" {total / r.seconds if r.seconds else 0:.0f} |"
            f" {r.rss_mb[0]:.0f}→{max(r.rss_mb):.0f}→{r.rss_mb[-1]:.0f} |"
            f" {r.fds[0]}→{max(r.fds)}→{r.fds[-1]} |",
            "",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=5)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--append-results", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mnemo-load-") as tmp:
        result = asyncio.run(run_load(args.chats, args.messages, args.db, Path(tmp)))
    command = "python bench/load_chats.py " + " ".join(sys.argv[1:])
    text = _report(result, command.strip())
    print(text)
    if result.errors:
        print("errors:", result.errors[:5], file=sys.stderr)
    if args.append_results:
        append_results(text)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
