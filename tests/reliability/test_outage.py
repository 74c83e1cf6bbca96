"""The database away for a while: PostgreSQL stopped (our own throwaway cluster,
`pgcluster.py`; the shared server is never touched) for 2, 20 or 120 s, right after a
restart of the bot, in every combination of

- *warm* chats (talked to this process already) and *cold* ones (not seen since the
  restart, or a new user: their session must be looked up in the store first);
- *between* turns (the database stops before the message arrives) and *mid-turn* (it
  stops while the model answers, so the answer's save fails).

Every message ends stored once and answered once; each held message got one notice
that its answer is delayed; no update was acknowledged to Telegram while its message
was not stored (every getUpdates offset sent during the outage is at or below the
oldest held update), and all are acknowledged afterwards. A last test passes the bound
(`bot.conversation.store_wait.HOLD_S`, shortened): the user is told "NOT saved" and the update is
acknowledged, nothing of it stored.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bot.conversation import store_wait
from bot.conversation.store_wait import DELAYED, NOT_SAVED_YET
from bot.conversation.turns import MEMORY_DOWN
from tests.fakes.openai_server import FakeOpenAI, gated, text
from tests.fakes.telegram_server import Chat, FakeTelegram, free_port
from tests.reliability import pgcluster
from tests.reliability.conftest import ask
from tests.reliability.harness import LiveBot, live_bot, session_id, stored_history

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not pgcluster.available(), reason="needs initdb and runuser"),
]

WAIT_S = 60.0  # generous: the bot retries every 5 s at most, the machine may be busy


@pytest.fixture
async def cluster() -> AsyncIterator[pgcluster.OwnCluster]:
    own = pgcluster.OwnCluster()
    await own.init()
    try:
        yield own
    finally:
        await own.destroy()


@dataclass
class Case:
    """One message sent while the database was (or went) away."""

    when: str  # between / mid-turn
    chat: str  # warm / cold
    uid: int
    text: str
    answer: str
    update_id: int = 0


@dataclass
class Tally:
    sent: int = 0
    stored: int = 0
    answered: int = 0
    duplicated: int = 0
    notices: int = 0
    rows: list[str] = field(default_factory=list)


def _count(tg: FakeTelegram, uid: int, contains: str) -> int:
    return sum(contains in m.text for m in tg.bot_messages(uid))


def _notices(tg: FakeTelegram, uid: int) -> int:
    """Lines saying the answer is delayed (or, streamed already, not saved yet)."""
    return sum(m.text in (DELAYED, NOT_SAVED_YET) for m in tg.bot_messages(uid))


async def _tally(bot: LiveBot, tg: FakeTelegram, cases: list[Case]) -> Tally:
    tally = Tally()
    for case in cases:
        history = await stored_history(bot.engine, session_id(case.uid))
        stored = history.count(("user", case.text))
        answers_stored = history.count(("assistant", case.answer))
        answered = _count(tg, case.uid, case.answer)
        notices = _notices(tg, case.uid)
        tally.sent += 1
        tally.stored += stored == 1 and answers_stored == 1
        tally.answered += answered >= 1
        tally.duplicated += stored > 1 or answers_stored > 1 or answered > 1
        tally.notices += notices
        said = [m.text for m in tg.bot_messages(case.uid)]
        kind = "streamed-not-saved" if NOT_SAVED_YET in said else "delayed"
        tally.rows.append(
            f"{case.when:8} {case.chat:5} stored={stored} answer_stored={answers_stored} "
            f"answered={answered} notices={notices} ({kind})"
        )
    return tally


async def _answer_stored(bot: LiveBot, case: Case) -> None:
    deadline = time.monotonic() + WAIT_S
    while ("assistant", case.answer) not in await stored_history(bot.engine, session_id(case.uid)):
        assert time.monotonic() < deadline, f"the answer to {case.text!r} was never stored"
        await asyncio.sleep(0.2)


def _acknowledged_before(tg: FakeTelegram, until: float) -> int:
    """The highest getUpdates offset sent before `until` (monotonic)."""
    return max(
        (int(c.params.get("offset") or 0) for c in tg.calls_to("getUpdates") if c.at < until),
        default=0,
    )


async def _down_for(
    cluster: pgcluster.OwnCluster, tg: FakeTelegram, down_s: float, held: list[Case], since: float
) -> None:
    """The held messages' notices, then the database back `down_s` after `since`.
    Messages not stored yet (between turns): their updates not acknowledged meanwhile
    (mid-turn ones were stored before the outage, so acknowledged already)."""
    for case in held:
        await tg.wait_for(lambda c=case: _notices(tg, c.uid) >= 1, within=WAIT_S)
    left = since + down_s - time.monotonic()
    if left > 0:
        await asyncio.sleep(left)
    back = time.monotonic()
    unstored = [c.update_id for c in held if c.when == "between"]
    if unstored:
        assert _acknowledged_before(tg, back) <= min(unstored)
    await cluster.start()


async def _round(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, cluster: pgcluster.OwnCluster, down_s: float
) -> Tally:
    """Both outages (between turns, mid-turn) of `down_s` seconds, right after a restart:
    warm and cold chats in each. Returns the tally of the messages sent meanwhile."""
    url = cluster.url
    # A first run: the cold chats have talked before the restart.
    async with live_bot(tmp_path, tg, llm, db_url=url, provider="lcm", record_updates=True):
        for uid in (11, 12):
            assert "echo: seed" in await ask(tg, tg.private(uid), "seed", within=WAIT_S)
    cases: list[Case] = []
    async with live_bot(tmp_path, tg, llm, db_url=url, provider="lcm", record_updates=True) as bot:
        for uid in (21, 22):  # warm: talked to this process
            assert "echo: warm" in await ask(tg, tg.private(uid), "warm", within=WAIT_S)

        # Between turns: the database is gone before the messages arrive. Cold: a chat
        # seen before the restart (11) and a new user (31).
        between = [
            Case("between", "warm", 21, "between 21", "echo: between 21"),
            Case("between", "cold", 11, "between 11", "echo: between 11"),
            Case("between", "cold", 31, "between 31", "echo: between 31"),
        ]
        await cluster.stop()
        since = time.monotonic()
        for case in between:
            tg.private(case.uid).send(case.text)
            case.update_id = tg.last_update_id
        await _down_for(cluster, tg, down_s, between, since)
        for case in between:
            await tg.wait_for_message(case.uid, contains=case.answer, within=WAIT_S)
        cases += between

        # Mid-turn: the messages are stored, the model is answering when it stops.
        mid = [
            Case("mid-turn", "warm", 22, "mid 22", "the answer to 22"),
            Case("mid-turn", "cold", 12, "mid 12", "the answer to 12"),
        ]
        gate = asyncio.Event()
        for case in mid:
            llm.push(gated(gate, text(case.answer)))
            asked = len(llm.requests)
            tg.private(case.uid).send(case.text)
            case.update_id = tg.last_update_id
            await asyncio.wait_for(llm.wait_for_requests(asked + 1), WAIT_S)
        await cluster.stop()
        since = time.monotonic()
        gate.set()
        await _down_for(cluster, tg, down_s, mid, since)
        for case in mid:  # (a streamed answer shows before it is stored)
            await _answer_stored(bot, case)
            await tg.wait_for_message(case.uid, contains=case.answer, within=WAIT_S)
        cases += mid

        # Everything acknowledged once stored, and the chats go on.
        assert "echo: after" in await ask(tg, tg.private(21), "after", within=WAIT_S)
        last = tg.last_update_id
        await tg.wait_for(lambda: _acknowledged_before(tg, float("inf")) > last, within=WAIT_S)
        tally = await _tally(bot, tg, cases)
    print(f"\noutage {down_s:g} s:\n  " + "\n  ".join(tally.rows))
    return tally


def _assert_all_kept(tally: Tally) -> None:
    assert tally.sent == 5
    assert (tally.stored, tally.answered, tally.duplicated) == (5, 5, 0), tally.rows
    assert tally.notices == 5, tally.rows  # one notice per held message


async def test_outage_2s(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, cluster: pgcluster.OwnCluster
) -> None:
    _assert_all_kept(await _round(tg, llm, tmp_path, cluster, 2))


@pytest.mark.slow
async def test_outage_20s(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, cluster: pgcluster.OwnCluster
) -> None:
    _assert_all_kept(await _round(tg, llm, tmp_path, cluster, 20))


@pytest.mark.slow
async def test_outage_120s(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, cluster: pgcluster.OwnCluster
) -> None:
    _assert_all_kept(await _round(tg, llm, tmp_path, cluster, 120))


async def test_outage_past_the_bound(
    tg: FakeTelegram,
    llm: FakeOpenAI,
    tmp_path: Path,
    cluster: pgcluster.OwnCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Down longer than an update may wait: told once it is delayed, then "NOT saved",
    acknowledged, nothing of it stored; the chat goes on once the database is back. A
    warm chat (held at the turn lock) and a new user (held finding the session)."""
    monkeypatch.setattr(store_wait, "HOLD_S", 2.0)
    async with live_bot(
        tmp_path, tg, llm, db_url=cluster.url, provider="lcm", record_updates=True
    ) as bot:
        chat: Chat = tg.private(41)
        assert "echo: before" in await ask(tg, chat, "before", within=WAIT_S)
        await cluster.stop()
        chat.send("too late")
        tg.private(42).send("too late")
        held = tg.last_update_id
        for uid in (41, 42):
            await tg.wait_for_message(uid, contains="NOT saved", within=WAIT_S)
        await tg.wait_for(lambda: _acknowledged_before(tg, float("inf")) > held, within=WAIT_S)
        await cluster.start()
        assert "echo: back" in await ask(tg, chat, "back", within=WAIT_S)
        assert [m.text for m in tg.bot_messages(41)] == [
            "echo: before",
            DELAYED,
            MEMORY_DOWN,
            "echo: back",
        ]
        assert [m.text for m in tg.bot_messages(42)] == [DELAYED, MEMORY_DOWN]
        assert await stored_history(bot.engine, session_id(41)) == [
            ("user", "before"),
            ("assistant", "echo: before"),
            ("user", "back"),
            ("assistant", "echo: back"),
        ]
        assert await stored_history(bot.engine, session_id(42)) == []


async def test_outage_in_webhook_mode(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, cluster: pgcluster.OwnCluster
) -> None:
    """Webhook mode: the POST of a held update is answered only once its message is
    stored (200), so Telegram would send it again if the bot died meanwhile."""
    port = free_port()
    hook = {"url": f"http://127.0.0.1:{port}/hook", "listen": "127.0.0.1", "port": port}
    async with live_bot(
        tmp_path,
        tg,
        llm,
        db_url=cluster.url,
        provider="lcm",
        record_updates=True,
        telegram={"webhook": hook},
    ) as bot:
        assert tg.webhook is not None
        assert "echo: warm" in await ask(tg, tg.private(51), "warm", within=WAIT_S)
        answered_posts = len(tg.webhook["responses"])
        await cluster.stop()
        for uid in (51, 52):  # warm, and a new user
            tg.private(uid).send(f"held {uid}")
        for uid in (51, 52):
            await tg.wait_for_message(uid, contains=DELAYED, within=WAIT_S)
        await asyncio.sleep(2)
        assert len(tg.webhook["responses"]) == answered_posts  # both POSTs still open
        await cluster.start()
        for uid in (51, 52):
            await tg.wait_for_message(uid, contains=f"echo: held {uid}", within=WAIT_S)
        await tg.wait_for(lambda: len(tg.webhook["responses"]) == answered_posts + 2, WAIT_S)
        assert tg.webhook["responses"][answered_posts:] == [200, 200]
        for uid in (51, 52):
            history = await stored_history(bot.engine, session_id(uid))
            assert history.count(("user", f"held {uid}")) == 1
            assert history.count(("assistant", f"echo: held {uid}")) == 1
            assert _count(tg, uid, f"echo: held {uid}") == 1
            assert _count(tg, uid, DELAYED) == 1
