"""Pages that once hung or stalled the bot (issue #32, item 3), over HTTP on SQLite and
PostgreSQL: the summary graph of short conversations (1, 2, 15, 16 messages; under 16
its axis loop never ended) and of 529 summaries; a profile diff of hundreds of edited
lines; and the event loop answering `/healthz` and other pages while a page is drawn,
with a clear 503 when the drawing takes longer than the limit."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.web import console as console_module
from bot.web.console import Console
from bot.web.offload import Offload
from memory.contract.capabilities import Provider
from memory.contract.options import WriteOptions
from memory.contract.types import ChangeSource, CompactionMode, Message, Session
from tests.ops.conftest import T0
from tests.web.site import (
    ALICE,
    VIEWER_TOKEN,
    client,
    login,
    open_provider,
    populate,
    serve,
    settings_for,
)

# Seq labels the axis must show: each message while they fit (under 16), then 1 and
# every multiple of a round step.
AXIS = {1: [1], 2: [1, 2], 15: list(range(1, 16)), 16: [1, *range(2, 17, 2)]}


def chat(n: int) -> list[Message]:
    return [
        Message(
            "user" if i % 2 == 0 else "assistant",
            f"message {i} about the garden",
            created_at=T0 + timedelta(seconds=i),
        )
        for i in range(n)
    ]


def axis_labels(page: str) -> list[int]:
    axis = page.split('<g class="axis">')[1].split("</g>")[0]
    return [int(n) for n in re.findall(r"<text x=\"[^\"]+\" y=\"[^\"]+\">(\d+)</text>", axis)]


def drawn_nodes(page: str) -> list[str]:
    return re.findall(r'data-node="([^"]+)"', page)


@pytest.fixture
async def provider(
    request: pytest.FixtureRequest, engine: AsyncEngine, tmp_path: Path
) -> AsyncIterator[tuple[Any, Any]]:
    """(settings, provider): the param names the provider, or gives (name, keep_tail,
    leaf_chunk_size); by default no tail kept and 2-message leaves, so even 1 or 2
    messages compact and the page draws their graph."""
    name, keep_tail, leaf = (
        (request.param, 0, 2) if isinstance(request.param, str) else request.param
    )
    settings = settings_for(
        str(engine.url), tmp_path, name, keep_tail=keep_tail, leaf_chunk_size=leaf
    )
    opened = await open_provider(settings, engine, tmp_path)
    try:
        yield settings, opened
    finally:
        await opened.close()


@pytest.mark.parametrize("provider", ["lcm", "simple"], indirect=True)
async def test_short_conversations_graphs_open(
    provider: tuple[Any, Provider], engine: AsyncEngine
) -> None:
    settings, memory = provider
    sessions = {n: Session(f"tg:short{n}", "default", 2000 + n, "telegram") for n in AXIS}
    for n, session in sessions.items():
        await memory.bootstrap(session)
        await memory.append(session, *chat(n))
        await memory.compact(session, CompactionMode.FULL)  # 15 and 16 get summaries
    async with serve(settings, engine, memory) as base, client() as http:
        await login(http, base, VIEWER_TOKEN)  # a viewer, as in the issue
        for n, session in sessions.items():
            r = await http.get(f"{base}/sessions/{session.id}/graph")
            page = await r.text()
            assert r.status == 200, (n, r.status, page)
            nodes = drawn_nodes(page)
            if memory.name == "lcm" and n == 1:  # one message makes no 2-message leaf
                assert not nodes and "No summaries yet" in page
                continue
            assert nodes, n
            assert axis_labels(page) == AXIS[n], n
            assert f"messages (seq 1–{n})" in page
            for node in nodes[:1]:  # and a node opens
                r = await http.get(f"{base}/sessions/{session.id}/graph?node={node}")
                assert r.status == 200 and 'id="detail"' in await r.text()
        assert (await http.get(f"{base}/healthz")).status == 200


@pytest.mark.parametrize("provider", [("lcm", 4, 4)], ids=["lcm"], indirect=True)
async def test_a_graph_of_529_summaries_opens(
    provider: tuple[Any, Provider], engine: AsyncEngine
) -> None:
    settings, memory = provider
    big = Session("tg:big", "default", 7, "telegram")
    await memory.bootstrap(big)
    await memory.append(big, *chat(1588))  # 4-message leaves: 396, condensed 99+25+6+2+1
    await memory.compact(big, CompactionMode.FULL)
    async with serve(settings, engine, memory) as base, client() as http:
        await login(http, base, VIEWER_TOKEN)
        r = await http.get(f"{base}/sessions/{big.id}/graph")
        page = await r.text()
        assert r.status == 200, page
        nodes = drawn_nodes(page)
        assert len(nodes) == len(set(nodes)) == 529
        labels = axis_labels(page)
        assert labels[0] == 1 and labels == sorted(labels) and labels[-1] <= 1588
        assert 5 <= len(labels) <= 200  # ticks ~120 px apart, not one per message
        r = await http.get(f"{base}/sessions/{big.id}/graph?node={nodes[-1]}")
        assert r.status == 200 and 'id="detail"' in await r.text()


@pytest.mark.parametrize("provider", ["simple"], indirect=True)
async def test_a_profile_diff_of_hundreds_of_edited_lines_renders(
    provider: tuple[Any, Provider], engine: AsyncEngine
) -> None:
    # difflib.ndiff took ~2 minutes on 500 such lines, on the event loop; a 2,000-line
    # profile (80 KB, under the 100,000-character cap) would take hours.
    settings, memory = provider
    before = "\n".join(f"fact {i}: likes item number {i * 7}" for i in range(2000))
    after = "\n".join(f"fact {i}: likes item number {i * 7 + 1}" for i in range(2000))
    for text in (before, after):
        await memory.set_profile(1001, "default", text, WriteOptions(ChangeSource.USER, "x"))
    async with serve(settings, engine, memory) as base, client() as http:
        await login(http, base, VIEWER_TOKEN)
        r = await http.get(f"{base}/memory/1001?scope=profile")
        page = await r.text()
        assert r.status == 200, page
        diff = page.split('<pre class="diff">')[1].split("</pre>")[0]
        assert diff.count('class="ddel">- fact') == diff.count('class="dadd">+ fact') == 2000
        assert '<span class="ddel">- fact 1999: likes item number 13993</span>' in diff
        assert '<span class="dadd">+ fact 1999: likes item number 13994</span>' in diff


class Held:
    """A stand-in for the graph's drawing that waits (in its worker thread) until the
    test releases it: a page that is slow for as long as the test wants."""

    def __init__(self, real: Callable[..., str]) -> None:
        self.real = real
        self.started, self.release = threading.Event(), threading.Event()
        self.finished = False

    def __call__(self, *args: Any) -> str:
        self.started.set()
        # Bounded so a console drawing on the loop (the bug) fails the test, not hangs it:
        # the loop, and with it the test, stays blocked until then.
        self.release.wait(60)
        self.finished = True
        return self.real(*args)


async def wait_for(event: threading.Event) -> None:
    for _ in range(600):
        if event.is_set():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the drawing never started")


@pytest.fixture
async def site_with_console(
    engine: AsyncEngine, tmp_path: Path
) -> AsyncIterator[tuple[str, Console]]:
    settings = settings_for(str(engine.url), tmp_path, "lcm")
    memory = await open_provider(settings, engine, tmp_path)
    try:
        await populate(memory)
        console = Console(settings, engine, memory)
        async with serve(settings, engine, memory, console) as base:
            yield base, console
    finally:
        await memory.close()


async def test_other_requests_answer_while_a_page_draws(
    site_with_console: tuple[str, Console], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, _ = site_with_console
    held = Held(console_module.render_dag)
    monkeypatch.setattr(console_module, "render_dag", held)
    async with client() as http, client() as other:
        await login(http, base, VIEWER_TOKEN)
        await login(other, base, VIEWER_TOKEN)
        graph = asyncio.create_task(http.get(f"{base}/sessions/{ALICE.id}/graph"))
        await wait_for(held.started)
        # The drawing is still going: the loop answers the health check and other pages.
        assert (await other.get(f"{base}/healthz")).status == 200
        assert (await other.get(f"{base}/sessions")).status == 200
        assert not held.finished
        held.release.set()
        r = await graph
        assert r.status == 200 and "<svg" in await r.text()


async def test_a_page_past_the_time_limit_answers_503(
    site_with_console: tuple[str, Console], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, console = site_with_console
    held = Held(console_module.render_dag)
    monkeypatch.setattr(console_module, "render_dag", held)
    try:
        async with client() as http:
            await login(http, base, VIEWER_TOKEN)
            # One worker, a short limit (set after the login: its page must not miss it).
            console.offload = Offload(workers=1, limit_s=0.5)
            r = await http.get(f"{base}/sessions/{ALICE.id}/graph")
            page = await r.text()
            assert r.status == 503 and "took longer than 0.5 s to draw" in page, page
            await wait_for(held.started)
            assert not held.finished  # given up on, not waited for
            assert "default-src 'none'" in r.headers["Content-Security-Policy"]
            # Its one worker is still held: pages wait for it, within the limit, then 503
            # (the error page itself is drawn on the loop); /healthz never waits.
            r = await http.get(f"{base}/sessions")
            assert r.status == 503 and "took longer" in await r.text()
            assert (await http.get(f"{base}/healthz")).status == 200
            held.release.set()
            for _ in range(600):  # the worker frees when the drawing ends
                if (r := await http.get(f"{base}/sessions")).status == 200:
                    break
                await asyncio.sleep(0.1)
            assert r.status == 200
    finally:
        held.release.set()
