"""Two `mnemo run` webhook processes on one PostgreSQL behind a round-robin load balancer:
200 updates for 10 chats, sent two at a time per chat so both replicas get updates of the
same chat at once. Every update is answered once, no turn interleaves with another of its
chat, the rounds stay in order, `/metrics` of the two replicas add up to the 200 turns,
and `mnemo memory doctor` finds the database clean (lcm, with background compactions
running on both replicas meanwhile)."""

from __future__ import annotations

import asyncio
import itertools
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from aiohttp import ClientError, ClientSession, web

from memory.storage.db import create_engine
from memory.storage.history import conversations, messages
from memory.testing.databases import temp_database_url
from plugins.lcm.models import summaries
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.waits import scaled

REPO = Path(__file__).resolve().parents[2]
CHATS, ROUNDS = 10, 10  # two messages per chat per round: 200 updates
SECRET = "replica-test-secret"

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@asynccontextmanager
async def load_balancer(targets: list[str]) -> AsyncIterator[str]:
    """Round-robin HTTP forwarder, as any load balancer in front of the replicas; a
    replica that refuses the connection (still starting) gets the request retried on
    the next one."""
    turn = itertools.cycle(range(len(targets)))
    http = ClientSession()

    async def forward(request: web.Request) -> web.Response:
        body = await request.read()
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() in ("content-type", "x-telegram-bot-api-secret-token")
        }
        for attempt in range(50):
            target = targets[next(turn)]
            try:
                async with http.post(target, data=body, headers=headers) as resp:
                    return web.Response(status=resp.status, body=await resp.read())
            except ClientError:
                await asyncio.sleep(0.1 * min(attempt + 1, 5))
        return web.Response(status=502)

    app = web.Application()
    app.router.add_post("/hook", forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/hook"
    finally:
        await runner.cleanup()
        await http.close()


def write_config(
    path: Path,
    *,
    db_url: str,
    tg: FakeTelegram,
    llm: FakeOpenAI,
    lb_url: str,
    hook_port: int,
    health_port: int,
    secret: str | None = SECRET,
) -> Path:
    """None: no secret_token (each replica derives the same one from the token)."""
    secret_line = "" if secret is None else f", secret_token: {secret}"
    path.write_text(
        f"""
database: {{url: "{db_url}"}}
data_dir: {path.parent}/data
llm: {{base_url: "{llm.base_url}", api_key: test-key, max_retries: 1}}
telegram:
  token: "{tg.token}"
  base_url: "{tg.base_url}"
  stream_edit_interval_s: 1
  webhook: {{url: "{lb_url}", listen: 127.0.0.1, port: {hook_port}{secret_line}}}
memory: {{provider: lcm, fresh_tail: 4, lcm: {{leaf_chunk_size: 4}}}}
compaction: {{max_tokens: 60, keep_tail: 4}}
reflect: {{enabled: false}}
health: {{enabled: true, listen: 127.0.0.1, port: {health_port}}}
""",
        encoding="utf-8",
    )
    return path


def replica_configs(
    tmp_path: Path,
    *,
    db_url: str,
    tg: FakeTelegram,
    llm: FakeOpenAI,
    url: str,
    hooks: list[int],
    health: list[int],
    secret: str | None = SECRET,
) -> list[Path]:
    """One config per replica: the same webhook url, each its own ports."""
    return [
        write_config(
            tmp_path / f"replica{i}.yaml",
            db_url=db_url,
            tg=tg,
            llm=llm,
            lb_url=url,
            hook_port=hook,
            health_port=port,
            secret=secret,
        )
        for i, (hook, port) in enumerate(zip(hooks, health, strict=True))
    ]


async def mnemo(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        *args,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def stop_all(procs: list[asyncio.subprocess.Process]) -> list[tuple[bytes, bytes]]:
    """SIGTERM to the replicas still running; their (stdout, stderr) once they exit."""
    for proc in procs:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
    return [await asyncio.wait_for(p.communicate(), scaled(60)) for p in procs]


async def turns_served(http: ClientSession, health_port: int) -> float:
    async with http.get(f"http://127.0.0.1:{health_port}/metrics") as resp:
        text = await resp.text()
    match = re.search(r'^mnemo_turns_total\{outcome="ok"\} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


async def chat_rounds(tg: FakeTelegram, chat_no: int) -> None:
    chat = tg.private(5000 + chat_no)
    for r in range(ROUNDS):
        texts = [f"c{chat_no} m{2 * r}", f"c{chat_no} m{2 * r + 1}"]
        for text in texts:  # both at once: round robin sends them to different replicas
            chat.send(text)
        for text in texts:
            await tg.wait_for_message(chat.id, contains=f"echo: {text}", within=120)


async def test_two_webhook_replicas_on_postgres(tmp_path: Path) -> None:
    hooks = [free_port(), free_port()]
    health = [free_port(), free_port()]
    async with (
        temp_database_url("postgres", tmp_path) as db_url,
        FakeTelegram() as tg,
        FakeOpenAI() as llm,
        load_balancer([f"http://127.0.0.1:{p}/hook" for p in hooks]) as lb_url,
    ):
        configs = replica_configs(
            tmp_path, db_url=db_url, tg=tg, llm=llm, url=lb_url, hooks=hooks, health=health
        )
        procs = [await mnemo("run", "--config", str(c)) for c in configs]
        try:
            await tg.wait_for(lambda: len(tg.calls_to("setWebhook")) >= 2, within=120)
            assert tg.webhook is not None and tg.webhook["url"] == lb_url
            await asyncio.wait_for(
                asyncio.gather(*(chat_rounds(tg, c) for c in range(CHATS))), timeout=scaled(600)
            )
            async with ClientSession() as http:
                served = [await turns_served(http, port) for port in health]
        finally:
            outputs = await stop_all(procs)
        for proc, (_, err) in zip(procs, outputs, strict=True):
            assert proc.returncode == 0, err.decode()[-3000:]

        # Every update answered exactly once, with the answer to that very message.
        for c in range(CHATS):
            texts = sorted(m.text for m in tg.bot_messages(5000 + c))
            assert texts == sorted(f"echo: c{c} m{k}" for k in range(2 * ROUNDS))
        # Both replicas served, and their metrics count exactly the turns taken.
        assert sum(served) == CHATS * ROUNDS * 2 and min(served) > 0, served

        # Per chat: question, its answer, question, its answer... rounds in order.
        engine = create_engine(db_url)
        try:
            async with engine.connect() as conn:
                rows = (
                    await conn.execute(
                        sa.select(conversations.c.session_id, messages.c.role, messages.c.content)
                        .join(messages, messages.c.conversation_id == conversations.c.id)
                        .order_by(conversations.c.id, messages.c.seq)
                    )
                ).all()
                # Background compactions ran on the replicas while turns went on.
                assert await conn.scalar(sa.select(sa.func.count()).select_from(summaries)) > 0
        finally:
            await engine.dispose()
        by_session: dict[str, list[tuple[str, str]]] = {}
        for session_id, role, content in rows:
            by_session.setdefault(session_id, []).append((role, content))
        assert len(by_session) == CHATS
        for history in by_session.values():
            assert len(history) == 4 * ROUNDS
            pairs = [(history[i], history[i + 1]) for i in range(0, len(history), 2)]
            for (q_role, q), (a_role, a) in pairs:
                assert (q_role, a_role, a) == ("user", "assistant", f"echo: {q}")
            rounds = [int(q.rsplit("m", 1)[1]) // 2 for (_, q), _ in pairs]
            assert rounds == sorted(rounds)

        doctor = await mnemo("memory", "doctor", "--config", str(configs[0]))
        out, err = await asyncio.wait_for(doctor.communicate(), scaled(120))
        assert doctor.returncode == 0, (out + err).decode()
        assert out.decode().startswith("ok: no faults")
