"""The per-user MCP endpoint (bot/mcp/), driven by the `mcp` SDK's own client over
Streamable HTTP, with tokens turned on and off through the bot on the fake Bot API:
search, show and ask (with citations) reach the token owner's memory only; another
person's message and summary ids answer "Not found.", as in the chat; their token,
a guessed token, a revoked one and none are refused before any tool runs; every access
is recorded and listed by `/memory mcp`, and past the rate limit a call is refused."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bot.app.root import start_mcp
from bot.mcp.access import TOKEN_PREFIX, AccessStore
from memory.actions.delegated_recall import SYSTEM_PROMPT
from memory.contract.types import SearchQuery, Session
from memory.storage import forgetting as fg
from memory.transfer.memory_export import export_memory
from tests.fakes.openai_server import FakeOpenAI, Response, echo, text
from tests.fakes.telegram_server import FakeTelegram, User, free_port
from tests.telegram.harness import running_bot

ALICE, BOB = 42, 77
PER_MINUTE = 12


def _reader(body: dict[str, Any]) -> Response:
    """The chat model echoes; the recall model cites each material line on the tart."""
    msgs = body.get("messages") or []
    if not msgs or not str(msgs[0].get("content") or "").startswith(SYSTEM_PROMPT):
        return echo(body)
    lines = str(msgs[-1].get("content") or "").partition("Material:\n")[2].splitlines()
    ids = [line[1 : line.index("]")] for line in lines if "lemon tart" in line]
    return text("Mum bakes it, " + " ".join(f"[{i}]" for i in ids) if ids else "NOTHING")


async def _said(tg: FakeTelegram, chat_id: int, words: str, expect: str = "") -> str:
    before = len(tg.bot_messages(chat_id))
    tg.private(chat_id).send(words)
    await tg.wait_for(
        lambda: any(expect in m.text for m in tg.bot_messages(chat_id)[before:]), within=20
    )
    return next(m.text for m in tg.bot_messages(chat_id)[before:] if expect in m.text)


@asynccontextmanager
async def _client(url: str, token: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http), cache=None) as client,
    ):
        yield client


async def _call(url: str, token: str | None, tool: str, **args: str) -> tuple[bool, str]:
    """(is_error, the text) of one tool call in a fresh connection."""
    async with _client(url, token) as client:
        result = await client.call_tool(tool, args)
    said = "\n".join(getattr(c, "text", "") for c in result.content)
    return bool(result.is_error), said


async def _refused(url: str, token: str | None) -> None:
    """`token` is refused before any tool runs: the SDK's client cannot connect, and the
    endpoint answers a tool call with it 401 and the bearer challenge."""
    with pytest.raises(BaseException, match="unhandled errors"):  # the SDK's error group
        await _call(url, token, "search", query="lemon tart")
    headers = {"Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "search", "arguments": {"query": "lemon tart"}},
    }
    async with httpx2.AsyncClient() as http:
        answer = await http.post(url, json=call, headers=headers)
    assert answer.status_code == 401, answer.text
    assert answer.headers["www-authenticate"].startswith("Bearer")


async def _summary_id(bot: Any, user_id: int) -> str:
    """One of the user's summaries (their memory export lists them)."""
    doc = await export_memory(fg.engine_of(bot.provider), user_id, "default", bot.provider)
    [session] = doc["sections"]["sessions"]
    return str(session["provider"]["data"]["summaries"][0]["id"])


async def test_search_show_and_ask_reach_their_owners_memory_only(
    tg: FakeTelegram, tmp_path: Path, db_kind: str
) -> None:
    port = free_port()
    mcp = {"enabled": True, "port": port, "requests_per_minute": PER_MINUTE}
    async with (
        FakeOpenAI(_reader) as llm,
        running_bot(tg, llm, tmp_path, provider="lcm", db=db_kind, sections={"mcp": mcp}) as bot,
    ):
        engine = fg.engine_of(bot.provider)
        endpoint = await start_mcp(bot.settings, engine, bot.conversations)
        try:
            for n in range(7):
                await _said(tg, ALICE, f"the lemon tart comes from Mum, part {n}", "echo:")
                await _said(tg, BOB, f"bob's plum cake secret is cardamom, part {n}", "echo:")
            for user in (ALICE, BOB):
                assert "summar" in (await _said(tg, user, "/compact", "ompact")).lower()
            await _said(tg, ALICE, "what about the lemon tart today?", "echo:")
            await _said(tg, BOB, "the plum cake again", "echo:")

            off = await _said(tg, ALICE, "/memory mcp", "No live MCP token")
            assert "No access recorded" in off
            tg.group(-100).send("/memory mcp on", user=User(ALICE))
            await tg.wait_for_message(-100, contains="ask me in a private chat")

            shown = await _said(tg, ALICE, "/memory mcp on", "Token: ")
            url = re.search(r"URL: (\S+)", shown).group(1)  # type: ignore[union-attr]
            token = re.search(r"Token: (\S+)", shown).group(1)  # type: ignore[union-attr]
            assert url == f"http://127.0.0.1:{port}/mcp" and token.startswith(TOKEN_PREFIX)
            bob_shown = await _said(tg, BOB, "/memory mcp on", "Token: ")
            bob_token = re.search(r"Token: (\S+)", bob_shown).group(1)  # type: ignore[union-attr]
            listed = await _said(tg, ALICE, "/memory mcp", "MCP token")
            assert token not in listed and "scope memory:read" in listed

            # The tools, with the SDK's client: read-only, exactly these.
            async with _client(url, token) as client:
                tools = {t.name: t for t in (await client.list_tools()).tools}
            assert sorted(tools) == ["ask", "search", "show", "timeline"]
            assert all(t.annotations and t.annotations.read_only_hint for t in tools.values())

            # search: Alice's hits with their dates and ids, none of Bob's.
            failed, found = await _call(url, token, "search", query="lemon tart cardamom")
            assert not failed and "lemon tart" in found, found
            assert "secret is cardamom" not in found and re.search(r"\d{4}-\d{2}-\d{2}", found)
            failed, found = await _call(url, bob_token, "search", query="lemon tart")
            assert found.startswith("No matches"), found

            # show: her message and summary by id; Bob's ids are not found for her.
            alice_session = Session("default:telegram:42", "default", ALICE, "telegram")
            [hit] = await bot.provider.search(alice_session, SearchQuery("today", limit=1))
            failed, message = await _call(url, token, "show", id=hit.source_id)
            assert not failed and "lemon tart today" in message, message
            alice_summary = await _summary_id(bot, ALICE)
            failed, summary = await _call(url, token, "show", id=alice_summary)
            assert not failed and alice_summary in summary, summary
            bob_session = Session("default:telegram:77", "default", BOB, "telegram")
            [bob_hit] = await bot.provider.search(bob_session, SearchQuery("again", limit=1))
            bob_summary = await _summary_id(bot, BOB)
            for other in (bob_hit.source_id, bob_summary):
                failed, said = await _call(url, token, "show", id=other)
                assert said == "Not found." and "cardamom" not in said, said

            # ask: delegated recall citing her messages; counted in her usage.
            rows: list[Any] = []  # what the user's usage and limits count
            bot.conversations.llm.usage.observers.append(rows.append)
            failed, answer = await _call(url, token, "ask", question="who brings the tart?")
            assert not failed and "Mum bakes it" in answer, answer
            assert re.search(r"\[\d+\]|#\d+", answer), answer  # citations
            assert [(r.kind, r.user_id) for r in rows] == [("recall", ALICE)]

            # timeline: her dated facts with what replaced what; never Bob's.
            await _said(tg, ALICE, "/memory fact home city: Lyon", "Noted")
            await _said(tg, ALICE, "/memory fact home city: Nantes", "Noted")
            await _said(tg, BOB, "/memory fact home city: Oslo", "Noted")
            failed, facts = await _call(url, token, "timeline")
            assert not failed and "Lyon" in facts and "then Nantes" in facts, facts
            assert "Oslo" not in facts
            failed, facts = await _call(url, token, "timeline", topic="city")
            assert not failed and "Nantes" in facts and "Oslo" not in facts, facts

            # Refused before any tool: none, a guessed token, a malformed one.
            for bad in (None, TOKEN_PREFIX + "A" * 43, "Bearer", token[:-1] + "x"):
                await _refused(url, bad)

            # Every access recorded and listed; over the rate limit, refused.
            listed = await _said(tg, ALICE, "/memory mcp", "Latest accesses")
            assert "search (ok" in listed and "ask (ok" in listed and "show (ok" in listed
            outcomes = []
            for _ in range(PER_MINUTE + 1):
                failed, said = await _call(url, token, "search", query="tart")
                outcomes.append((failed, said))
            assert outcomes[-1][0] and "rate limited" in outcomes[-1][1]
            listed = await _said(tg, ALICE, "/memory mcp", "Latest accesses")
            assert "(limited" in listed

            # Revoked: refused at once; Bob's token still works, and only for Bob.
            revoked = await _said(tg, ALICE, "/memory mcp off", "Revoked 1")
            assert "nothing reaches your memory" in revoked
            await _refused(url, token)
            listed = await _said(tg, ALICE, "/memory mcp", "No live MCP token")
            assert "- (revoked" in listed  # the attempt, shown to its owner
            failed, found = await _call(url, bob_token, "search", query="plum cake")
            assert not failed and "plum cake" in found
            # A new `on` revokes the older token of the same person.
            await _said(tg, BOB, "/memory mcp on", "Token: ")
            await _refused(url, bob_token)
        finally:
            await endpoint.stop()


async def test_tokens_are_stored_as_digests_and_expire(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with running_bot(tg, llm, tmp_path, provider="lcm") as bot:
        engine = fg.engine_of(bot.provider)
        store = AccessStore(engine)
        issued = await store.issue(ALICE, "default", "telegram", ttl_s=60)
        assert (await store.verify(issued.token)) == issued.grant
        async with engine.connect() as conn:
            from sqlalchemy import text as sql

            dump = str((await conn.execute(sql("SELECT * FROM mcp_tokens"))).all())
        assert issued.token not in dump and issued.token[len(TOKEN_PREFIX) :] not in dump
        expired = await store.issue(BOB, "default", "telegram", ttl_s=-1)
        assert await store.verify(expired.token) is None
        off = await _said(tg, ALICE, "/memory mcp on", "MCP endpoint is off")
        assert "mcp.enabled" in off


def test_the_endpoint_needs_a_port_of_its_own_and_an_http_url() -> None:
    from bot.config.settings import Settings

    with pytest.raises(ValueError, match="needs a port of its own"):
        Settings.model_validate(
            {"health": {"enabled": True}, "mcp": {"enabled": True, "port": 9464}}
        )
    with pytest.raises(ValueError, match="http"):
        Settings.model_validate({"mcp": {"public_url": "mnemo.example.org/mcp"}})
    ok = Settings.model_validate({"mcp": {"public_url": "https://mnemo.example.org/mcp"}})
    assert ok.mcp.token_ttl_s == 30 * 86400 and not ok.mcp.enabled


async def test_an_erasure_deletes_the_persons_tokens_and_access_record(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, db_kind: str
) -> None:
    from bot.mcp.access import mcp_accesses, mcp_tokens, register
    from memory.contract.types import Owner

    register()  # as `mnemo run` does (bot.app.services.register_erasure_hooks)
    async with running_bot(tg, llm, tmp_path, provider="lcm", db=db_kind) as bot:
        await _said(tg, ALICE, "something to forget", "echo:")
        engine = fg.engine_of(bot.provider)
        store = AccessStore(engine)
        mine = await store.issue(ALICE, "default", "telegram", ttl_s=600)
        theirs = await store.issue(BOB, "default", "telegram", ttl_s=600)
        await store.admit(mine.grant, "search", 10)
        await store.admit(theirs.grant, "search", 10)
        report = await fg.erase(bot.provider, Owner(ALICE, "default"), by="test")
        assert report.extra["MCP token(s)"] == 1 and report.extra["MCP access record(s)"] == 1
        assert await store.verify(mine.token) is None
        assert await store.verify(theirs.token) == theirs.grant  # nobody else's
        async with engine.connect() as conn:
            left = (await conn.execute(mcp_tokens.select())).all()
            accesses = (await conn.execute(mcp_accesses.select())).all()
        assert [r.user_id for r in left] == [BOB] and [r.user_id for r in accesses] == [BOB]
