"""Reply latency of turns that trigger automatic compaction vs turns that do not.

The pool promises that no user waits for a summarizer: compaction runs after the reply,
in the background, and only the provider's short swap transaction takes the session's
lock. This benchmark gives the summarizer a fixed delay (2 s by default, a slow model)
and measures `Conversations.chat` latency (user message in -> reply out, LLM over HTTP to the fake
OpenAI server on loopback answering instantly) for every turn of several concurrent
sessions. A turn "triggers" compaction when the background task it scheduled calls the
summarizer; "overlapping" turns are those that ran while a compaction of their own session
was in flight. Target (issue 4): p50 of triggering turns within 1.2x of the others.

The conversations run in lockstep (same lengths, same start), so every session crosses
the threshold at the same turn and all their compactions plan (reads, transcript) in the
same ~100 ms: the triggering turns are exactly the turns at that peak of background
work. A second figure therefore compares each triggering turn with the same session's
turn just before it (same moment of the run, one turn less of context).

    .venv/bin/python bench/compaction_latency.py [--provider lcm] [--delay 2]
        [--sessions 8] [--turns 25] [--append-results]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import append_results, machine, percentile  # noqa: E402
from bot.config.settings import Settings  # noqa: E402
from bot.conversation.service import Conversations  # noqa: E402
from bot.model.client import LLMClient  # noqa: E402
from memory.compaction.summarizer import TruncatingSummarizer  # noqa: E402
from memory.contract.capabilities import ProviderContext  # noqa: E402
from memory.contract.registry import create_provider_async  # noqa: E402
from memory.contract.types import Session, SummarizeOptions  # noqa: E402
from memory.storage.db import create_engine, migrate  # noqa: E402
from memory.storage.session_lock import SessionLocks  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402


@dataclass
class SlowSummarizer:
    """A deterministic summary after a fixed delay; records which background task asked."""

    delay_s: float
    inner: TruncatingSummarizer = field(default_factory=TruncatingSummarizer)
    tasks: set[asyncio.Task] = field(default_factory=set)
    active: dict[str, int] = field(default_factory=dict)  # session id -> calls in flight

    async def summarize(self, text: str, opts: SummarizeOptions) -> str:
        task = asyncio.current_task()
        name = task.get_name() if task else ""
        if task is not None:
            self.tasks.add(task)
        self.active[name] = self.active.get(name, 0) + 1
        try:
            await asyncio.sleep(self.delay_s)
            return await self.inner.summarize(text, opts)
        finally:
            self.active[name] -= 1


@dataclass
class Turn:
    session: str
    index: int
    latency_s: float
    scheduled: set[asyncio.Task]
    overlapped: bool


async def run(args: argparse.Namespace) -> tuple[list[Turn], set[asyncio.Task], Settings]:
    summarizer = SlowSummarizer(args.delay)
    with tempfile.TemporaryDirectory(prefix="compaction-bench-") as tmp:
        async with FakeOpenAI() as server:
            settings = Settings.model_validate(
                {
                    "database": {"url": f"sqlite+aiosqlite:///{tmp}/bench.db"},
                    "llm": {"base_url": server.base_url, "api_key": "bench", "max_retries": 0},
                    "data_dir": tmp,
                    "memory": {
                        "provider": args.provider,
                        "budget_tokens": 4000,
                        "fresh_tail": 8,
                        "simple": {"store_dir": f"{tmp}/notes"},
                    },
                    "compaction": {"max_tokens": args.max_tokens, "keep_tail": 8},
                }
            )
            engine = create_engine(settings.database.url)
            await migrate(engine)
            provider = await create_provider_async(
                settings.memory.provider,
                ProviderContext(
                    engine=engine,
                    summarizer=summarizer,
                    agent_id=settings.agent.id,
                    data_dir=Path(tmp),
                    config=settings.provider_config(),
                ),
            )
            llm = LLMClient(settings.llm)
            locks = SessionLocks(engine)
            pool = Conversations(provider, llm, settings, locks=locks)
            turns: list[Turn] = []

            async def conversation(n: int) -> None:
                session = Session(id=f"bench:{n}", user_id=1000 + n, channel="bench")
                for i in range(args.turns):
                    text = f"turn {i} of conversation {n}: " + "tell me more about it " * 8
                    before = set(pool.background_tasks)
                    overlapped = summarizer.active.get(f"compact:{session.id}", 0) > 0
                    t0 = time.perf_counter()
                    reply = await pool.chat(session, text)
                    latency = time.perf_counter() - t0
                    if reply.error:
                        raise RuntimeError(reply.text)
                    overlapped |= summarizer.active.get(f"compact:{session.id}", 0) > 0
                    # Only this session's task: other sessions schedule theirs meanwhile.
                    mine = {
                        t
                        for t in set(pool.background_tasks) - before
                        if t.get_name() == f"compact:{session.id}"
                    }
                    turns.append(Turn(session.id, i, latency, mine, overlapped))

            try:
                await asyncio.gather(*(conversation(n) for n in range(args.sessions)))
                await pool.drain()
            finally:
                await pool.close()
                await locks.close()
                await provider.close()
                await llm.close()
                await engine.dispose()
    return turns, summarizer.tasks, settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--provider", default="lcm")
    parser.add_argument("--delay", type=float, default=2.0, help="summarizer delay, seconds")
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=25)
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=800,
        help="compaction.max_tokens (small, so compaction triggers often)",
    )
    parser.add_argument("--append-results", action="store_true", help="append to bench/HISTORY.md")
    args = parser.parse_args()

    turns, summarizing, _settings = asyncio.run(run(args))
    triggering = [t.latency_s for t in turns if t.scheduled & summarizing]
    overlapping = [t.latency_s for t in turns if t.overlapped and not t.scheduled & summarizing]
    plain = [t.latency_s for t in turns if not t.overlapped and not t.scheduled & summarizing]
    others = overlapping + plain
    ratio = (
        statistics.median(triggering) / statistics.median(others) if triggering else float("nan")
    )
    by_key = {(t.session, t.index): t for t in turns}
    vs_before = [
        t.latency_s / by_key[(t.session, t.index - 1)].latency_s
        for t in turns
        if t.scheduled & summarizing and t.index > 0
    ]
    ms = 1000
    rows = [
        ("triggering compaction", triggering),
        ("while own compaction ran", overlapping),
        ("no compaction involved", plain),
        ("all non-triggering", others),
    ]
    lines = [
        f"\n## Auto-compaction and reply latency ({datetime.now(UTC):%Y-%m-%d})\n",
        f"- machine: {machine()}",
        f"- command: `.venv/bin/python bench/compaction_latency.py --provider {args.provider} "
        f"--delay {args.delay:g} --sessions {args.sessions} --turns {args.turns} "
        f"--max-tokens {args.max_tokens}`",
        f"- {args.sessions} concurrent sessions x {args.turns} turns, SQLite, provider "
        f"`{args.provider}`, summarizer delayed {args.delay:g} s, fake OpenAI server on "
        "loopback answering instantly (streamed)",
        "",
        "| turns | n | p50 ms | p95 ms |",
        "|---|---:|---:|---:|",
    ]
    for label, values in rows:
        if values:
            lines.append(
                f"| {label} | {len(values)} | {statistics.median(values) * ms:.1f} | "
                f"{percentile(values, 0.95) * ms:.1f} |"
            )
        else:
            lines.append(f"| {label} | 0 | - | - |")
    lines.append("")
    lines.append(
        f"p50 ratio triggering / non-triggering: **{ratio:.2f}x** (target <= 1.2x); "
        f"{len(summarizing)} background compactions called the summarizer."
    )
    if vs_before:
        lines.append(
            f"Median of (triggering turn / the same session's turn before it): "
            f"**{statistics.median(vs_before):.2f}x** over {len(vs_before)} pairs."
        )
    report = "\n".join(lines) + "\n"
    print(report)
    if args.append_results:
        append_results(report)


if __name__ == "__main__":
    main()
