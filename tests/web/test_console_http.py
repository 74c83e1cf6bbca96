"""The console over HTTP (no browser): every page on lcm and simple, SQLite and
PostgreSQL; logins, roles and CSRF refusals; no secret on any page."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.web.auth import SESSION_COOKIE
from memory.contract.types import SearchMode
from tests.web.site import (
    ALICE,
    BOB,
    HOSTILE,
    OLD,
    OPERATOR_TOKEN,
    SECRETS,
    VIEWER_TOKEN,
    client,
    csrf_of,
    login,
)


def no_secret(page: str) -> None:
    for secret in SECRETS:
        assert secret not in page


async def test_every_page_renders_and_shows_no_secret(site: tuple[str, str]) -> None:
    base, provider = site
    async with client() as http:
        r = await http.get(f"{base}/sessions")
        assert r.url.path == "/login"  # not logged in: sent to the login
        await login(http, base, VIEWER_TOKEN)
        pages: dict[str, str] = {}
        for name, url in {
            "sessions": "/sessions",
            "archived": "/sessions?archived=1&q=old",
            "conversation": f"/sessions/{ALICE.id}",
            "first page": f"/sessions/{ALICE.id}?page=1",
            "hostile": f"/sessions/{BOB.id}",
            "archived conversation": f"/sessions/{quote(OLD.id, safe='')}",
            "graph": f"/sessions/{ALICE.id}/graph",
            "search": f"/search?session={ALICE.id}&q=question&mode=full_text&scope=both",
            "search by user": "/search?session=1002&q=aquarium",
            "memory": "/memory/1001?scope=profile",
            "soul": "/memory/1001?scope=soul",
            "changelog": "/changelog",
            "usage": "/usage?by=user&days=7",
            "healthz": "/healthz",
        }.items():
            r = await http.get(base + url)
            assert r.status == 200, (name, r.status, await r.text())
            pages[name] = await r.text()
            no_secret(pages[name])
            if name != "healthz":
                assert "default-src 'none'" in r.headers["Content-Security-Policy"]
                assert r.headers["X-Frame-Options"] == "DENY"
                assert "<script" not in pages[name]  # no inline (or any) script
        assert "tg:alice" in pages["sessions"] and "tg:carol#old" not in pages["sessions"]
        assert "an old chat" in pages["archived"]
        assert "Context for the next turn" in pages["conversation"]
        assert "Likes coffee" in pages["conversation"]  # the profile in the system prompt
        if provider == "lcm":  # its summaries in the context, each linking to the graph
            assert re.search(
                r'class="msg summary".*graph\?node=sum_[0-9a-f]+#detail', pages["conversation"]
            )
        assert "question 0:" in pages["first page"]
        assert HOSTILE not in pages["hostile"]  # escaped, never markup
        assert "&lt;script&gt;alert(" in pages["hostile"]
        assert "<svg" in pages["graph"]
        kind = "leaf" if provider == "lcm" else "marker"
        assert f'class="node {kind}' in pages["graph"]
        assert "result(s)" in pages["search"] and "question" in pages["search"]
        assert "2 result(s) in the memory of user 1002" in pages["search by user"]
        assert "Works at night" in pages["memory"]
        assert "reflect" in pages["changelog"] and "compaction" in pages["changelog"]
        usage = pages["usage"].split('id="usage"')[1]
        assert ">1001<" in usage and ">2<" in usage and ">2,240<" in usage  # calls, tokens


async def test_a_graph_node_opens_its_detail(site: tuple[str, str]) -> None:
    base, _ = site
    async with client() as http:
        await login(http, base, VIEWER_TOKEN)
        graph = await (await http.get(f"{base}/sessions/{ALICE.id}/graph")).text()
        drawn = re.findall(
            r'data-node="([^"]+)"><rect[^>]*><title>[^<]*messages (\d+)–(\d+)', graph
        )
        assert len(drawn) >= 2
        # The first (a leaf or marker) and the last (the deepest): the detail's source
        # range is the one the drawing spans.
        for node, low, high in (drawn[0], drawn[-1]):
            r = await http.get(f"{base}/sessions/{ALICE.id}/graph?node={node}")
            page = await r.text()
            assert r.status == 200 and 'id="detail"' in page and node in page
            assert f"messages {low}–{high}" in page and "time range" in page
        r = await http.get(f"{base}/sessions/{ALICE.id}/graph?node=sum_0000")
        assert r.status == 404
        r = await http.get(f"{base}/sessions/{BOB.id}/graph?node={drawn[0][0]}")
        assert r.status == 404  # another session's node is not found through this one


@pytest.mark.parametrize("mode", [m.value for m in SearchMode])
async def test_search_modes_link_to_the_message(site: tuple[str, str], mode: str) -> None:
    base, _ = site
    async with client() as http:
        await login(http, base, VIEWER_TOKEN)
        page = await (
            await http.get(
                f"{base}/search",
                params={"session": BOB.id, "q": "aquarium", "mode": mode, "scope": "messages"},
            )
        ).text()
        link = re.search(r'href="(/sessions/tg%3Abob\?at=(\d+)#m\d+)"', page)
        assert link, page
        target = await (await http.get(base + link.group(1).replace("&amp;", "&"))).text()
        assert f'id="m{link.group(2)}" class="hit"' in target


async def test_roles_and_csrf_guard_the_rollback(
    site: tuple[str, str], engine: AsyncEngine
) -> None:
    base, _ = site
    url = f"{base}/memory/1001/rollback"
    form = {"scope": "profile", "version": "2", "confirm": "yes"}
    async with client() as http:
        await login(http, base, VIEWER_TOKEN)
        page = await (await http.get(f"{url}?scope=profile&version=2")).text()
        assert "confirm-rollback" not in page  # a viewer gets no button
        r = await http.post(url, data={**form, "csrf": csrf_of(page)})
        assert r.status == 403 and "viewer cannot roll back" in await r.text()
    async with client() as http:
        await login(http, base, OPERATOR_TOKEN)
        page = await (await http.get(f"{url}?scope=profile&version=2")).text()
        r = await http.post(url, data=form)  # no token
        assert r.status == 403 and "token is missing" in await r.text()
        r = await http.post(url, data={**form, "csrf": "forged"})
        assert r.status == 403
        current = await (await http.get(f"{base}/memory/1001?scope=profile")).text()
        assert "Likes coffee (wrong)" in current.split('id="current"')[1].split("</pre>")[0]
        r = await http.post(url, data={**form, "csrf": csrf_of(page)})
        assert r.status == 200 and "Rolled back" in await r.text()
        log = await (await http.get(f"{base}/changelog?source=operator")).text()
        assert "web:ann" in log and "Works at night" in log
        # Alice's session reads it from its next turn: its snapshot moved.
        page = await (await http.get(f"{base}/sessions/{ALICE.id}")).text()
        system = page.split('class="msg system"')[1].split("</li>")[0]
        assert "Works at night" in system and "coffee" not in system


async def test_logins_are_checked(site: tuple[str, str]) -> None:
    base, _ = site
    async with client() as http:
        page = await (await http.get(f"{base}/login")).text()
        r = await http.post(f"{base}/login", data={"token": "wrong", "csrf": csrf_of(page)})
        assert r.status == 403 and "Unknown token" in await r.text()
        r = await http.post(f"{base}/login", data={"token": OPERATOR_TOKEN})  # no CSRF
        assert r.status == 403
        assert (await http.get(f"{base}/changelog")).url.path == "/login"
    async with client() as http:
        http.cookie_jar.update_cookies({SESSION_COOKIE: "ann|operator|9999999999|00|k|forged"})
        assert (await http.get(f"{base}/changelog")).url.path == "/login"
        await login(http, base, OPERATOR_TOKEN)
        page = await (await http.get(f"{base}/sessions")).text()
        await http.post(f"{base}/logout", data={"csrf": csrf_of(page)})
        assert (await http.get(f"{base}/sessions")).url.path == "/login"


async def test_sessions_are_counted_and_sorted(site: tuple[str, str]) -> None:
    """The listing says how many sessions and pages it holds, and sorts by user, by
    session id or by last activity either way, keeping its filters."""
    base, _ = site
    listed = re.compile(r'<td><a href="/sessions/([^"]+)">')
    async with client() as http:
        await login(http, base, VIEWER_TOKEN)

        async def order(by: str, **more: str) -> tuple[list[str], str]:
            page = await (await http.get(f"{base}/sessions", params={"order": by, **more})).text()
            return listed.findall(page), page

        recent, page = await order("recent")
        assert "page 1 of 1 (2 sessions)" in page  # the archived one is not counted
        assert sorted(recent) == ["tg%3Aalice", "tg%3Abob"]
        assert (await order("oldest"))[0] == recent[::-1]
        assert (await order("user"))[0] == ["tg%3Aalice", "tg%3Abob"]  # 1001, 1002
        assert (await order("session"))[0] == ["tg%3Aalice", "tg%3Abob"]
        assert (await order("no such order"))[0] == recent
        every, page = await order("session", archived="1")
        assert every == ["tg%3Aalice", "tg%3Abob", "tg%3Acarol%23old"]
        assert "(3 sessions)" in page
        assert 'name="order" value="session"' in page  # the filter form keeps the order
