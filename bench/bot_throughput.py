"""Bot throughput and bot-added latency (issue 4, benchmark (a)).

Both fake servers run in this process on loopback: the fake Bot API
(tests/fakes/telegram_server.py) and the fake OpenAI server answering instantly (an echo,
streamed). Bots run one at a time as subprocesses against the same fake Bot API:

- `mnemo run` with a fresh config: the real bot, lcm on SQLite, reflect off;
- a bare python-telegram-bot echo bot (this file, `--echo-bot`), same
  `concurrent_updates` and HTTP pool size: the reference;
- our Telegram channel alone (`--channel-bot`): `build_application` with a pool that
  answers at once, no memory and no LLM: what the channel itself costs.

`--chats` chats each send `--rounds` messages one after the other (the next once the
previous is answered), all chats at once, after one warm-up round that is not measured
(it creates the sessions). Latency = update injected -> the final sendMessage for it
reaching the fake server; throughput = measured updates / wall time of the rounds; CPU
per update = the bot process's CPU time during the rounds / updates. mnemo and the echo
bot alternate `--repeat` times, and the figure is the median of the pairs' ratios: on a
shared machine whose speed drifts, one pair alone swung 0.20x-0.31x.
Target: mnemo at least half the echo bot's throughput.

`--turns-only` measures the pool's turn alone instead, in this process: `Conversations.chat` over
`build_services` (the provider on SQLite, the same instant fake OpenAI server, run in a
child process so its CPU is not counted), `--concurrency` turns at a time: turns/s, CPU
per turn (this process, every thread) and SQL statements per turn.

    .venv/bin/python bench/bot_throughput.py [--chats 200] [--rounds 5] [--repeat 3]
        [--concurrency 64] [--provider lcm] [--turns-only] [--append-results]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._common import append_results, machine, percentile  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402
from tests.fakes.telegram_server import ApiCall, FakeTelegram  # noqa: E402

# --- the reference echo bot (runs in its own process) -----------------------------------


def echo_bot_main(token: str, base_url: str, concurrency: int) -> None:
    from telegram import Update
    from telegram.ext import Application, ContextTypes, MessageHandler, filters

    async def echo(update: Update, _context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None and update.message.text is not None
        await update.message.reply_text("echo: " + update.message.text)

    app = (
        Application.builder()
        .token(token)
        .base_url(f"{base_url}/bot")
        .base_file_url(f"{base_url}/file/bot")
        .concurrent_updates(concurrency)
        .connection_pool_size(2 * concurrency + 4)
        .pool_timeout(30.0)
        .build()
    )
    app.add_handler(MessageHandler(filters.TEXT, echo))
    app.run_polling(allowed_updates=["message"], timeout=30)


class InstantPool:
    """Stands in for bot.conversation.service.Conversations: echoes at once (streams the answer first, as a model
    would), so only the Telegram channel's own work is measured."""

    def __init__(self) -> None:
        self.reflect_listeners: list[object] = []  # the channel subscribes its digest

    async def current_session(self, base: object) -> object:
        return base

    async def chat(
        self,
        session: object,
        text: str,
        *,
        on_delta: object = None,
        receipt: object = None,
        images: object = (),
        origin: object = None,
        wait: object = None,
    ) -> object:
        from bot.conversation.service import Reply

        if receipt is not None:  # durable at once, as after the pool's user-message append
            await receipt.stored(atomic=False)  # type: ignore[attr-defined]
        if on_delta is not None:
            await on_delta("echo: " + text)  # type: ignore[operator]
        return Reply("echo: " + text)

    async def answer_id(self, session: object, asked: object) -> None:
        return None  # nothing is stored

    async def answer_sent(
        self, session: object, asked: object, sent: object, answer: object
    ) -> None:
        return None


def channel_bot_main(token: str, base_url: str, concurrency: int) -> None:
    from bot.channels.telegram.channel import build_application, running
    from bot.config.settings import Settings

    settings = Settings.model_validate(
        {"telegram": {"token": token, "base_url": base_url, "concurrent_updates": concurrency}}
    )

    async def serve() -> None:
        import signal as sig

        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(sig.SIGTERM, stop.set)
        app = build_application(settings, InstantPool())  # type: ignore[arg-type]
        async with running(app, settings):
            await stop.wait()

    asyncio.run(serve())


def fake_llm_main() -> None:
    """The instant fake OpenAI server on its own (for `--turns-only`): prints its URL."""

    async def serve() -> None:
        async with FakeOpenAI() as llm:
            print(llm.base_url, flush=True)
            await asyncio.Event().wait()  # until terminated

    asyncio.run(serve())


# --- measurement ------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    updates: int
    wall_s: float
    latencies_s: list[float]
    calls: dict[str, int]  # Bot API calls by method during the measured rounds
    cpu_s: float  # CPU time of the bot's process during the measured rounds

    @property
    def cpu_ms_per_update(self) -> float:
        return self.cpu_s / self.updates * 1000

    @property
    def calls_per_update(self) -> float:
        return sum(self.calls.values()) / self.updates

    @property
    def rate(self) -> float:
        return self.updates / self.wall_s

    def pct_ms(self, q: float) -> float:
        return percentile(self.latencies_s, q) * 1000


class Driver:
    """Sends each chat's messages and times the answers, from the fake server's side."""

    def __init__(self, tg: FakeTelegram, pid: int) -> None:
        self.tg = tg
        self.pid = pid
        self.cpu_s = 0.0
        self.waiting: dict[int, tuple[float, str, asyncio.Future[float]]] = {}
        self.counting = False
        self.calls: dict[str, int] = {}
        tg.subscribe(self._on_call)

    def _on_call(self, call: ApiCall) -> None:
        if self.counting:
            self.calls[call.method] = self.calls.get(call.method, 0) + 1
        if call.method != "sendMessage":
            return
        entry = self.waiting.pop(int(call.params["chat_id"]), None)
        if entry is None or entry[2].done():
            return
        sent, asked, future = entry
        # Every bot here echoes: anything else (an apology) is a failure, not throughput.
        answer = str(call.params.get("text", ""))
        if asked in answer:
            future.set_result(call.at - sent)
        else:
            future.set_exception(RuntimeError(f"asked {asked!r}, answered {answer[:200]!r}"))

    async def ask(self, chat_id: int, text: str) -> float:
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.waiting[chat_id] = (time.monotonic(), text, future)
        self.tg.private(chat_id).send(text)
        return await asyncio.wait_for(future, 120)

    async def run(self, chats: int, rounds: int, first_chat: int) -> tuple[float, list[float]]:
        ids = range(first_chat, first_chat + chats)
        await asyncio.gather(*(self.ask(c, "warm up") for c in ids))
        latencies: list[float] = []

        async def chat(c: int) -> None:
            for r in range(rounds):
                latencies.append(await self.ask(c, f"message {r} from {c}"))

        start, self.counting, cpu = time.monotonic(), True, process_cpu_s(self.pid)
        await asyncio.gather(*(chat(c) for c in ids))
        self.counting, self.cpu_s = False, process_cpu_s(self.pid) - cpu
        return time.monotonic() - start, latencies


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds `pid` has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def wait_until_polling(tg: FakeTelegram, proc: asyncio.subprocess.Process) -> None:
    before = len(tg.calls_to("getUpdates"))
    deadline = time.monotonic() + 120
    while len(tg.calls_to("getUpdates")) <= before:
        if proc.returncode is not None or time.monotonic() > deadline:
            raise RuntimeError("the bot did not start")
        await asyncio.sleep(0.1)


async def measure(
    name: str, argv: list[str], tg: FakeTelegram, args: argparse.Namespace, first_chat: int
) -> Result:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=REPO, env=env, stderr=asyncio.subprocess.PIPE
    )
    try:
        await wait_until_polling(tg, proc)
        driver = Driver(tg, proc.pid)
        wall, latencies = await driver.run(args.chats, args.rounds, first_chat)
    finally:
        if proc.returncode is None:  # one that died at start is shown its stderr below
            proc.send_signal(signal.SIGTERM)
        _, err = await proc.communicate()
        if proc.returncode not in (0, -signal.SIGTERM):
            print(err.decode()[-2000:], file=sys.stderr)
    return Result(name, len(latencies), wall, latencies, driver.calls, driver.cpu_s)


def write_config(tmp: Path, tg: FakeTelegram, llm: FakeOpenAI, args: argparse.Namespace) -> Path:
    path = tmp / "config.yaml"
    path.write_text(f"""
database: {{url: "sqlite+aiosqlite:///{tmp}/mnemo.db"}}
data_dir: {tmp}/data
llm: {{base_url: "{llm.base_url}", api_key: bench, max_retries: 0}}
telegram: {{token: "{tg.token}", base_url: "{tg.base_url}", concurrent_updates: {args.concurrency}}}
memory: {{provider: {args.provider}, simple: {{store_dir: "{tmp}/data/memory"}}}}
reflect: {{enabled: false}}
log_level: WARNING
""")
    return path


@dataclass
class Runs:
    """`--repeat` pairs of (mnemo, echo) runs, alternated so that a machine whose speed
    drifts during the benchmark (shared and noisy) skews every pair alike; the channel
    alone once."""

    mnemo: list[Result]
    echo: list[Result]
    channel: Result

    @property
    def ratios(self) -> list[float]:
        return [m.rate / e.rate for m, e in zip(self.mnemo, self.echo, strict=True)]


async def main(args: argparse.Namespace) -> Runs:
    mnemo: list[Result] = []
    echo: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="bot-bench-") as tmp:
        async with FakeTelegram() as tg, FakeOpenAI() as llm:
            config = write_config(Path(tmp), tg, llm, args)
            for i in range(args.repeat):
                mnemo.append(
                    await measure(
                        f"mnemo run ({args.provider}, SQLite)",
                        [sys.executable, "-m", "bot.cli", "run", "--config", str(config)],
                        tg,
                        args,
                        first_chat=1 + i * 10_000,
                    )
                )
                echo.append(
                    await measure(
                        "bare PTB echo bot",
                        [
                            sys.executable,
                            __file__,
                            "--echo-bot",
                            tg.token,
                            tg.base_url,
                            str(args.concurrency),
                        ],
                        tg,
                        args,
                        first_chat=100_001 + i * 10_000,
                    )
                )
            channel = await measure(
                "our Telegram channel, instant pool (no memory, no LLM)",
                [
                    sys.executable,
                    __file__,
                    "--channel-bot",
                    tg.token,
                    tg.base_url,
                    str(args.concurrency),
                ],
                tg,
                args,
                first_chat=50_001,
            )
    return Runs(mnemo, echo, channel)


async def turns_only(args: argparse.Namespace) -> str:
    from sqlalchemy import event

    from bot.app.services import build_services
    from bot.config.settings import Settings
    from memory.contract.types import Session

    server = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--fake-llm", stdout=asyncio.subprocess.PIPE
    )
    assert server.stdout is not None
    base_url = (await server.stdout.readline()).decode().strip()
    try:
        with tempfile.TemporaryDirectory(prefix="bot-bench-") as tmp:
            settings = Settings.model_validate(
                {
                    "database": {"url": f"sqlite+aiosqlite:///{tmp}/mnemo.db"},
                    "data_dir": f"{tmp}/data",
                    "llm": {"base_url": base_url, "api_key": "bench", "max_retries": 0},
                    "memory": {
                        "provider": args.provider,
                        "simple": {"store_dir": f"{tmp}/data/memory"},
                    },
                    "reflect": {"enabled": False},
                }
            )
            services = await build_services(settings)
            statements = 0

            def count(*_: object) -> None:
                nonlocal statements
                statements += 1

            event.listen(services.engine.sync_engine, "before_cursor_execute", count)
            sessions = [
                Session(id=f"bench:{i}", agent_id=settings.agent.id, user_id=i, channel="bench")
                for i in range(1, args.chats + 1)
            ]
            gate = asyncio.Semaphore(args.concurrency)

            async def turn(session: Session, text: str) -> None:
                async with gate:
                    reply = await services.conversations.chat(session, text)
                if reply.error:
                    raise RuntimeError(reply.text)

            await asyncio.gather(*(turn(s, "warm up") for s in sessions))
            await services.conversations.drain()
            statements, cpu, start = 0, time.process_time(), time.monotonic()
            for r in range(args.rounds):
                await asyncio.gather(*(turn(s, f"message {r} from {s.user_id}") for s in sessions))
            await services.conversations.drain()
            wall, cpu = time.monotonic() - start, time.process_time() - cpu
            await services.close()
    finally:
        server.terminate()
        await server.wait()
    n = args.chats * args.rounds
    return "\n".join(
        [
            f"## Conversations turn alone, in-process ({datetime.now(UTC):%Y-%m-%d})",
            "",
            f"- machine: {machine()}",
            f"- command: `.venv/bin/python bench/bot_throughput.py --turns-only --chats "
            f"{args.chats} --rounds {args.rounds} --concurrency {args.concurrency} "
            f"--provider {args.provider}`",
            "",
            "| turns | turns/s | CPU ms per turn | SQL statements per turn |",
            "|---:|---:|---:|---:|",
            f"| {n} | {n / wall:.1f} | {cpu / n * 1000:.2f} | {statements / n:.1f} |",
            "",
        ]
    )


def report(runs: Runs, args: argparse.Namespace) -> str:
    lines = [
        f"## Bot throughput vs a bare PTB echo bot ({datetime.now(UTC):%Y-%m-%d})",
        "",
        f"- machine: {machine()}",
        f"- command: `.venv/bin/python bench/bot_throughput.py --chats {args.chats} "
        f"--rounds {args.rounds} --concurrency {args.concurrency} --provider {args.provider} "
        f"--repeat {args.repeat}`",
        f"- {args.chats} private chats sending concurrently, {args.rounds} messages each "
        f"(after one unmeasured warm-up round); fake Bot API and instant fake OpenAI server "
        f"on loopback in the driver process; `concurrent_updates` {args.concurrency} for "
        f"both; mnemo and the echo bot alternate, {args.repeat} run(s) each",
        "",
        "| bot | updates | updates/s | p50 ms | p95 ms | bot CPU ms per update "
        "| Bot API calls per update |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    pairs = [r for pair in zip(runs.mnemo, runs.echo, strict=True) for r in pair]
    for r in [*pairs, runs.channel]:
        per = ", ".join(f"{m} {n / r.updates:.2f}" for m, n in sorted(r.calls.items()))
        lines.append(
            f"| {r.name} | {r.updates} | {r.rate:.1f} | {r.pct_ms(0.5):.1f} | "
            f"{r.pct_ms(0.95):.1f} | {r.cpu_ms_per_update:.2f} | "
            f"{r.calls_per_update:.2f} ({per}) |"
        )
    ratios = runs.ratios
    echo_rate = statistics.median(r.rate for r in runs.echo)
    lines += [
        "",
        f"mnemo / echo throughput, median of {len(ratios)} pair(s): "
        f"**{statistics.median(ratios):.2f}x** (target >= 0.5x; pairs: "
        f"{', '.join(f'{x:.2f}' for x in ratios)}); channel alone / echo: "
        f"{runs.channel.rate / echo_rate:.2f}x; bot CPU per update, mnemo / echo: "
        f"{statistics.median(r.cpu_ms_per_update for r in runs.mnemo):.2f} / "
        f"{statistics.median(r.cpu_ms_per_update for r in runs.echo):.2f} ms.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--fake-llm":
        fake_llm_main()
        sys.exit(0)
    if len(sys.argv) > 1 and sys.argv[1] in ("--echo-bot", "--channel-bot"):
        main_of = echo_bot_main if sys.argv[1] == "--echo-bot" else channel_bot_main
        main_of(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--provider", default="lcm")
    parser.add_argument(
        "--repeat", type=int, default=3, help="mnemo / echo pairs, alternated (default 3)"
    )
    parser.add_argument(
        "--turns-only",
        action="store_true",
        help="measure the pool's turn alone, in-process (no Telegram)",
    )
    parser.add_argument(
        "--append-results", action="store_true", help="append the figures to bench/HISTORY.md"
    )
    ns = parser.parse_args()
    text = asyncio.run(turns_only(ns)) if ns.turns_only else report(asyncio.run(main(ns)), ns)
    print(text)
    if ns.append_results:
        append_results(text)
