"""An operator reads a user's facts in the console, each with when it became true and
links to the messages it rests on, and sets or retracts one after a page naming the
change; the earlier fact stays with its interval closed, the changelog names the
operator, a stale confirmation and a viewer are refused. Over HTTP, lcm and simple on
both databases."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.facts import FactOp
from memory.contract.options import WriteOptions
from memory.contract.types import ChangeSource
from memory.storage.history import conversations, messages
from tests.web.site import (
    ALICE,
    OPERATOR_TOKEN,
    VIEWER_TOKEN,
    client,
    csrf_of,
    login,
    open_provider,
    populate,
    serve,
    settings_for,
)


@pytest.fixture(params=["lcm", "simple"])
async def facts_site(
    request: pytest.FixtureRequest, engine: AsyncEngine, tmp_path: Path
) -> AsyncIterator[tuple[str, int]]:
    """The populated console, Alice holding one fact that rests on her first message:
    (base URL, that message's id)."""
    settings = settings_for(str(engine.url), tmp_path, request.param)
    provider = await open_provider(settings, engine, tmp_path)
    try:
        await populate(provider)
        first = await _first_message_id(engine)
        await provider.apply_facts(
            1001,
            "default",
            [FactOp("set", "home city", "London", [first])],
            WriteOptions(ChangeSource.REFLECT, ALICE.id),
        )
        async with serve(settings, engine, provider) as base:
            yield base, first
    finally:
        await provider.close()


async def _first_message_id(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int(
            await conn.scalar(
                sa.select(sa.func.min(messages.c.id))
                .join(conversations, conversations.c.id == messages.c.conversation_id)
                .where(conversations.c.session_id == ALICE.id)
            )
        )


def field(page: str, name: str) -> str:
    m = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert m, f"no field {name}"
    return m.group(1)


def table(page: str, name: str) -> str:
    return page.split(f'id="{name}"')[1].split("</table>")[0]


async def test_an_operator_supersedes_and_retracts_a_fact(
    facts_site: tuple[str, int],
) -> None:
    base, first = facts_site
    url = f"{base}/memory/1001/facts"
    async with client() as http:
        await login(http, base, OPERATOR_TOKEN)
        assert 'id="facts-tab"' in await (await http.get(f"{base}/memory/1001")).text()
        page = await (await http.get(url)).text()
        now = table(page, "current-facts")
        assert "home city" in now and "London" in now
        assert f'href="/sessions/tg%3Aalice?at={first}#m{first}"' in now  # its source
        sent = {"csrf": csrf_of(page), "shown": field(page, "shown"), "op": "set"}
        sent |= {"key": "Home  City", "value": "Berlin"}
        preview = await (await http.post(url, data=sent)).text()
        change = preview.split('id="fact-change"')[1].split("</p>")[0]
        assert "Berlin" in change and "superseding <b>London</b>" in change
        assert 'id="confirm-fact"' in preview
        r = await http.post(url, data={**sent, "confirm": "yes"})
        page = await r.text()
        assert r.status == 200 and 'id="saved"' in page
        now, earlier = table(page, "current-facts"), table(page, "earlier-facts")
        assert "Berlin" in now and "London" not in now
        row = earlier.split("London")[1].split("</tr>")[0]
        assert "superseded" in row and re.search(r"\d{4}-\d\d-\d\d", row)  # closed
        # The confirmation again was drawn over facts that moved: refused, unwritten.
        r = await http.post(url, data={**sent, "value": "Paris", "confirm": "yes"})
        assert r.status == 409
        assert "Paris" not in await (await http.get(url)).text()
        # Retract: the page names the fact; the confirmation closes it.
        form = await (await http.get(f"{url}?op=retract&key=home%20city")).text()
        data = {"csrf": csrf_of(form), "shown": field(form, "shown"), "op": "retract"}
        data["key"] = "home city"
        preview = await (await http.post(url, data=data)).text()
        assert "Retract <b>home city: Berlin</b>" in preview
        r = await http.post(url, data={**data, "confirm": "yes"})
        page = await r.text()
        assert "No current facts." in table(page, "current-facts")
        assert "retracted" in table(page, "earlier-facts")
        log = await (await http.get(f"{base}/changelog?scope=fact&source=operator")).text()
        assert log.count("web:ann") == 2
        # The profile the model reads lists the current facts: none now.
        profile = await (await http.get(f"{base}/memory/1001?scope=profile")).text()
        assert "Berlin" not in profile.split('id="current">')[1].split("</pre>")[0]


async def test_a_viewer_reads_facts_but_cannot_change_them(
    facts_site: tuple[str, int],
) -> None:
    base, _ = facts_site
    url = f"{base}/memory/1001/facts"
    async with client() as http:
        await login(http, base, VIEWER_TOKEN)
        page = await (await http.get(url)).text()
        assert "London" in page and 'id="preview-fact"' not in page and "retract</a>" not in page
        data = {"csrf": csrf_of(page), "shown": "x", "op": "set", "key": "k", "value": "v"}
        r = await http.post(url, data={**data, "confirm": "yes"})
        assert r.status == 403
        assert "London" in table(await (await http.get(url)).text(), "current-facts")
