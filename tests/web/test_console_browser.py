"""The console in a real browser (Debian's Chromium driven by Playwright): log in, browse
sessions, open a conversation, open the graph and click a node, search, roll back a
profile version and see the changelog row; a viewer cannot roll back; a form without
its CSRF token is refused; no secret on any page. One browser per module; each page's
screenshot is saved under test-output/web-console/ for a person to look at.

Runs on lcm over SQLite and simple over PostgreSQL (tests/web/test_console_http.py
covers every page on all four combinations without a browser)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory.testing.databases import temp_database_url
from tests.web.site import (
    ALICE,
    BOB,
    HOSTILE,
    LONG,
    OPERATOR_TOKEN,
    RULE,
    SECRETS,
    VIEWER_TOKEN,
    open_provider,
    populate,
    serve,
    settings_for,
)

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SHOTS = Path(__file__).resolve().parents[2] / "test-output" / "web-console"

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency")
if not os.path.exists(CHROMIUM):
    why = f"{CHROMIUM} is missing: `make test` installs it as root (apt-get install -y chromium)"
    if os.geteuid() == 0:  # root: `make test` would have installed it; never pass silently
        pytest.fail(why, pytrace=False)
    pytest.skip(why, allow_module_level=True)


class Site:
    """The populated console served from a thread of its own (Playwright's sync API
    must not run inside the test's event loop)."""

    def __init__(self, provider: str, db: str) -> None:
        self.provider, self.db = provider, db
        self.base = ""
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        from memory.storage.db import create_engine, migrate

        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        tmp = Path(tempfile.mkdtemp(prefix="mnemo-web-"))
        try:
            async with temp_database_url(self.db, tmp) as url:
                settings = settings_for(url, tmp, self.provider)
                engine = create_engine(settings.database.url)
                await migrate(engine)
                provider = await open_provider(settings, engine, tmp)
                try:
                    await populate(provider)
                    async with serve(settings, engine, provider) as base:
                        self.base = base
                        self._ready.set()
                        await self._stop.wait()
                finally:
                    await provider.close()
                    await engine.dispose()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def __enter__(self) -> Site:
        self._thread.start()
        self._ready.wait(120)
        if self._error is not None or not self.base:
            raise RuntimeError(f"the console did not start: {self._error!r}")
        return self

    def __exit__(self, *_: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(("lcm", "sqlite"), id="lcm-sqlite"),
        pytest.param(("simple", "postgres"), id="simple-postgres", marks=pytest.mark.postgres),
    ],
)
def site(request: pytest.FixtureRequest) -> Iterator[Site]:
    with Site(*request.param) as s:
        yield s


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


class Visit:
    """One person's browser context: every page checked for secrets and screenshotted."""

    def __init__(self, browser: Any, site: Site, who: str, width: int = 1280) -> None:
        self.site = site
        self.context = browser.new_context(viewport={"width": width, "height": 860})
        self.page = self.context.new_page()
        self.dir = SHOTS / f"{site.provider}-{site.db}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.who = who
        self.dialogs: list[str] = []
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))

    def go(self, path: str) -> Any:
        self.page.goto(self.site.base + path)
        return self.page

    def shot(self, name: str) -> None:
        html = self.page.content()
        for secret in SECRETS:
            assert secret not in html, f"a secret on {self.page.url}"
        assert not self.dialogs, f"a script ran: {self.dialogs}"
        self.page.screenshot(path=str(self.dir / f"{self.who}-{name}.png"), full_page=True)

    def login(self, token: str) -> None:
        page = self.go("/sessions")
        assert page.url.endswith("/login")
        self.shot("login")
        page.fill("#token", token)
        page.click("button[type=submit]")
        page.wait_for_url("**/sessions")

    def close(self) -> None:
        self.context.close()


def test_an_operator_browses_and_rolls_back(site: Site, browser: Any) -> None:
    v = Visit(browser, site, "operator")
    try:
        v.login(OPERATOR_TOKEN)
        page = v.page
        assert page.locator("#sessions tbody tr").count() == 2  # the archived one hidden
        v.shot("sessions")
        page.click(f"text={ALICE.id}")
        page.wait_for_url("**/sessions/tg%3Aalice")
        assert page.locator("ol.context li").count() > 1
        assert "Likes coffee" in page.locator("ol.context li.system").inner_text()
        v.shot("conversation")

        page.click("text=Summary graph")
        page.wait_for_selector("svg.dag")
        nodes = page.locator("svg.dag a")
        assert nodes.count() >= (3 if site.provider == "lcm" else 2)
        v.shot("graph")
        nodes.last.click()
        page.wait_for_selector("#detail")
        assert "time range" in page.locator("#detail").inner_text()
        assert page.locator("rect.selected").count() == 1
        v.shot("graph-node")

        page.click("nav >> text=Search")
        page.fill("input[name=session]", BOB.id)
        page.fill("input[name=q]", "aquarium")
        page.select_option("select[name=mode]", "substring")
        page.click("form.filters button")
        page.wait_for_selector("#hits li")
        v.shot("search")
        page.locator("#hits li", has_text="hostile text").locator("a").click()
        page.wait_for_selector("tr.hit")
        assert HOSTILE in page.locator("tr.hit").inner_text()  # shown as text, not run
        v.shot("search-hit")

        v.go("/memory/1001?scope=profile")
        assert "Likes coffee (wrong)" in page.locator("#current").inner_text()
        v.shot("memory")
        page.locator("#versions tr", has_text="Works at night").count()  # rendered
        page.click("#versions tbody tr:nth-child(2) >> text=roll back to this")
        page.wait_for_selector("#confirm-rollback")
        v.shot("rollback-confirm")
        page.click("#confirm-rollback")
        page.wait_for_selector("p.ok")
        assert page.locator("#current").inner_text() == "Alice. Likes tea.\nWorks at night."
        v.shot("rolled-back")

        page.click("nav >> text=Changelog")
        row = page.locator("#changelog tbody tr").first
        assert "operator" in row.inner_text() and "web:ann" in row.inner_text()
        v.shot("changelog")
    finally:
        v.close()


def test_a_viewer_cannot_roll_back_nor_post_without_the_token(site: Site, browser: Any) -> None:
    v = Visit(browser, site, "viewer")
    try:
        v.login(VIEWER_TOKEN)
        page = v.go("/memory/1001?scope=soul")
        assert page.locator("text=roll back to this").count() == 0
        v.shot("memory")
        page = v.go("/memory/1001/rollback?scope=profile&version=1")
        assert page.locator("#confirm-rollback").count() == 0
        v.shot("rollback-refused")
        # Forms posted with the browser's own cookies (the page's CSP forbids a script
        # from fetching): first without the token, then as the viewer with it.
        page = v.go("/sessions")
        csrf = page.locator("input[name=csrf]").first.get_attribute("value")
        form = {"scope": "profile", "version": "1", "confirm": "yes"}
        for fields in ({}, {"csrf": csrf}):
            r = v.context.request.post(
                f"{site.base}/memory/1001/rollback", form={**form, **fields}, max_redirects=0
            )
            assert r.status == 403, r.text()
        page = v.go("/changelog?source=operator")
        assert "web:vic" not in page.content()  # nothing written by the viewer
        v.shot("changelog")
        page = v.go("/usage?by=kind")
        assert page.locator("#usage tbody tr").count() == 2  # chat and reflect
        v.shot("usage")
    finally:
        v.close()


# Every page of the console, as an operator sees it.
PAGES = {
    "sessions": "/sessions",
    "conversation": "/sessions/tg%3Aalice",
    "graph": "/sessions/tg%3Aalice/graph",
    "long-message": "/sessions/tg%3Acarol%23old",
    "search": f"/search?session={BOB.id}&q=aquarium&mode=hybrid",
    "memory": "/memory/1001?scope=profile",
    "rules": "/memory/1001?scope=constraint",
    "rollback-confirm": "/memory/1001/rollback?scope=profile&version=2",
    "edit": "/memory/1001/edit?scope=profile",
    "rule-add": "/memory/1001/rule",
    "facts": "/memory/1001/facts",
    "erase-confirm": "/memory/1002/erase",
    "changelog": "/changelog",
    "usage": "/usage",
    "not-found": "/sessions/nobody-here",
}


@pytest.mark.parametrize("width", [390, 1280])
def test_every_page_fits_its_width(site: Site, browser: Any, width: int) -> None:
    """No page scrolls sideways at a phone's width or a laptop's (wide tables and the
    graph scroll inside their card), and the header keeps "Log out" on its own dark
    background. Each page is saved as `<width>-<page>.png`."""
    v = Visit(browser, site, f"{width}", width=width)
    try:
        v.login(OPERATOR_TOKEN)
        for name, path in PAGES.items():
            page = v.go(path)
            wide = page.evaluate("document.documentElement.scrollWidth")
            assert wide <= width, f"{name} is {wide} px wide at {width} px"
            header = page.locator("header.top").bounding_box()
            button = page.locator("header.top button.link").bounding_box()
            assert header and button
            assert button["x"] + button["width"] <= header["x"] + header["width"]
            assert button["y"] + button["height"] <= header["y"] + header["height"], name
            v.shot(name)
    finally:
        v.close()


def test_pages_say_what_they_show(site: Site, browser: Any) -> None:
    """Rules read as text, a 5,000-character message folded, no rollback to the text
    already current, a framed 404, a note when hybrid search has no embeddings, usage
    with separators, totals and a bar a day, and the graph marking the messages no
    summary covers."""
    v = Visit(browser, site, "operator")
    try:
        v.login(OPERATOR_TOKEN)
        page = v.go("/changelog?scope=constraint")
        row = page.locator("#changelog tbody tr").first.inner_text()
        assert RULE in row and '"id"' not in row
        page = v.go("/memory/1001?scope=profile")
        rows = page.locator("#versions tbody tr")
        assert "roll back to this" not in rows.first.inner_text()  # it is the current text
        assert "roll back to this" in rows.nth(1).inner_text()
        page = v.go("/sessions/tg%3Acarol%23old")
        fold = page.locator("details.fold")
        assert fold.count() == 1
        end = page.locator("details.fold > pre")
        assert not end.is_visible() and LONG[-21:] in (end.text_content() or "")
        fold.locator("summary").click()
        assert end.is_visible()
        v.shot("long-message-open")
        response = page.goto(site.base + "/sessions/nobody-here")
        assert response is not None and response.status == 404
        assert page.locator("header.top nav").count() == 1  # framed: the console's header
        assert page.locator("h1").inner_text() == "Not Found"
        assert "No such session." in page.locator("p.error").inner_text()
        page = v.go(f"/search?session={BOB.id}&q=aquarium&mode=hybrid")
        assert "embeddings" in page.locator("#mode-note").inner_text()
        assert page.locator("#hits li").count() >= 1  # the word search's hits, shown
        page = v.go("/usage?by=kind&days=30")
        assert "1,200" in page.locator("#usage").inner_text()  # thousands separated
        assert "2 call(s)" in page.locator("#totals").inner_text()
        bars = page.locator("#per-day svg.chart rect.bar")
        assert bars.count() == 30  # one a day of the period, the empty ones too
        tips = [t or "" for t in bars.locator("title").all_text_contents()]
        assert sum(": 2 calls," in t for t in tips) == 1, tips  # today's two calls
        if site.provider == "lcm":  # a tail the compaction kept as messages
            page = v.go("/sessions/tg%3Aalice/graph")
            assert "kept as messages" in (page.locator("svg.dag g.tail").text_content() or "")
    finally:
        v.close()


def test_an_operator_acts_on_memory_and_each_change_is_in_the_changelog(
    site: Site, browser: Any
) -> None:
    """Every action an operator has, clicked as a person would: edit a soul, add a rule,
    set a fact, forget a message, download an export, erase a user; each (but the
    download) leaves its changelog row with source operator and the operator's name.
    The context bar and a turn page are drawn on the way. Last in the module: it changes
    the memory the other tests read."""
    v = Visit(browser, site, "acting")
    try:
        v.login(OPERATOR_TOKEN)
        page = v.go("/sessions/tg%3Aalice")
        assert page.locator("#context-bar svg rect.part").count() == 4
        with page.expect_download() as download:
            page.click("#export")
        assert download.value.suggested_filename.startswith("mnemo-tg_alice")
        page.locator("a.turn").first.click()
        page.wait_for_url("**/turn/*")
        assert page.locator("#turn-usage").count() == 1
        v.shot("turn")

        v.go("/memory/1001?scope=soul")
        page.click("#edit")
        page.fill("textarea[name=text]", "Warm, brief and punctual.")
        page.click("#preview-edit")
        page.wait_for_selector("#edit-diff")
        v.shot("edit-preview")
        page.click("#confirm-edit")
        page.wait_for_selector("#saved")
        assert page.locator("#current").inner_text() == "Warm, brief and punctual."

        v.go("/memory/1001?scope=constraint")
        page.click("#add-rule")
        page.fill("textarea[name=add]", "Answer in French.")
        page.click("#preview-rule")
        page.wait_for_selector("#confirm-rule")
        v.shot("rule-preview")
        page.click("#confirm-rule")
        page.wait_for_selector("#saved")
        assert "Answer in French." in page.locator("#current").inner_text()

        v.go("/memory/1001/facts")
        page.fill("input[name=key]", "home city")
        page.fill("input[name=value]", "Lyon")
        page.click("#preview-fact")
        page.wait_for_selector("#confirm-fact")
        v.shot("fact-preview")
        page.click("#confirm-fact")
        page.wait_for_selector("#saved")
        assert "Lyon" in page.locator("#current-facts").inner_text()
        v.shot("facts")

        page = v.go("/sessions/tg%3Abob")
        page.locator("a", has_text="forget…").first.click()
        page.wait_for_selector("#confirm-forget")
        v.shot("forget-preview")
        page.click("#confirm-forget")
        page.wait_for_selector("#forgotten")

        v.go("/memory/1003")
        page.click("#erase")
        page.wait_for_selector("#confirm-erase")
        page.click("#confirm-erase")
        page.wait_for_selector("#erased")

        rows = {}
        for scope in ("soul", "constraint", "fact", "forget", "erasure"):
            page = v.go(f"/changelog?scope={scope}&source=operator")
            rows[scope] = page.locator("#changelog tbody tr").first.inner_text()
        v.shot("changelog-acted")
        for scope, row in rows.items():
            assert "operator" in row and "web:ann" in row, (scope, row)
    finally:
        v.close()
