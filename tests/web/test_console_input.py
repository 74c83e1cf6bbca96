"""Numbers too big for the database and NUL characters, in every parameter and path
segment the console takes, answer 400 with a message naming the parameter, on SQLite
and PostgreSQL, lcm and simple (issue #32, item 6b: they were 500s). Numbers just
inside the 64-bit range still reach the pages."""

from __future__ import annotations

from urllib.parse import quote

from tests.web.site import ALICE, OPERATOR_TOKEN, client, csrf_of, login

HUGE = "1" + "0" * 29  # 30 digits
OVER = str(2**63)  # one past BIGINT
LOW = str(-(2**63) - 1)
ALICE_URL = f"/sessions/{quote(ALICE.id, safe='')}"

# (url, what the message names)
TOO_BIG = [
    (f"/sessions?page={HUGE}", "page"),
    (f"/sessions?user={HUGE}", "user"),
    (f"/sessions?user={LOW}", "user"),
    (f"/changelog?page={OVER}", "page"),
    (f"/changelog?user={HUGE}", "user"),
    (f"{ALICE_URL}?page={HUGE}", "page"),
    (f"{ALICE_URL}?at={HUGE}", "at"),
    (f"{ALICE_URL}?at={OVER}", "at"),
    (f"/memory/{HUGE}", "user id"),
    (f"/memory/{OVER}?scope=soul", "user id"),
    (f"/memory/{HUGE}/rollback?scope=profile&version=1", "user id"),
    (f"/memory/1001?v={HUGE}", "v"),
    (f"/memory/1001?done={HUGE}", "done"),
    (f"/memory/1001/rollback?scope=profile&version={HUGE}", "version"),
    (f"/usage?days={HUGE}", "days"),
    ("/sessions?page=12abc", "page"),  # not a number at all: the same message
]
WITH_NUL = [
    "/sessions/%00",
    "/sessions/tg%3Aalice%00",
    "/sessions/%00/graph",
    "/memory/%00",
    "/memory/1001%00",
    "/sessions?q=%00",
    "/sessions?q=a%00b",
    "/sessions?%00=1",
    f"{ALICE_URL}/graph?node=sum_%00",
    "/search?session=tg%3Aalice&q=tea%00",
    "/search?session=%00&q=tea",
    "/memory/1001?agent=%00",
    "/memory/1001?scope=%00",
    "/changelog?scope=%00",
    "/changelog?source=%00",
    "/usage?by=%00",
]


def refused(status: int, page: str) -> None:
    assert status == 400, (status, page)
    assert "<title>Refused" in page and 'role="alert"' in page  # the console's error page


async def test_out_of_range_numbers_and_nuls_answer_400(site: tuple[str, str]) -> None:
    base, _ = site
    async with client() as http:
        await login(http, base, OPERATOR_TOKEN)
        for url, name in TOO_BIG:
            r = await http.get(base + url, allow_redirects=False)
            page = await r.text()
            refused(r.status, page)
            assert f"{name} must be a whole number between" in page, url
            assert "default-src 'none'" in r.headers["Content-Security-Policy"]
        for url in WITH_NUL:
            r = await http.get(base + url, allow_redirects=False)
            page = await r.text()
            refused(r.status, page)
            assert "NUL character" in page, url
        # A form's fields too: a rollback's version and scope.
        page = await (await http.get(f"{base}/memory/1001/rollback?scope=profile&version=2")).text()
        form = {"scope": "profile", "version": "2", "confirm": "yes", "csrf": csrf_of(page)}
        url = f"{base}/memory/1001/rollback"
        r = await http.post(url, data={**form, "version": HUGE}, allow_redirects=False)
        text = await r.text()
        refused(r.status, text)
        assert "version must be a whole number" in text
        r = await http.post(url, data={**form, "scope": "profile\x00"}, allow_redirects=False)
        text = await r.text()
        refused(r.status, text)
        assert "NUL character" in text
        # Nothing was rolled back by them, and the pages still work.
        log = await (await http.get(f"{base}/changelog?source=operator")).text()
        assert "web:ann" not in log
        for url in ("/sessions", ALICE_URL, "/memory/1001", "/changelog", "/healthz"):
            assert (await http.get(base + url)).status == 200, url


async def test_numbers_inside_the_range_reach_the_pages(site: tuple[str, str]) -> None:
    base, _ = site
    top, bottom = str(2**63 - 1), str(-(2**63))
    async with client() as http:
        await login(http, base, OPERATOR_TOKEN)
        for url in (
            f"/sessions?user={top}",
            f"/sessions?user={bottom}",
            f"/changelog?user={bottom}",
            f"{ALICE_URL}?at={top}",
            f"/memory/{top}",
            f"/memory/{bottom}?scope=soul",
            "/sessions?page=1000000000",
            f"/sessions?page={top}",  # clamped: past the last page is the last
            f"/usage?days={top}",
        ):
            r = await http.get(base + url)
            assert r.status == 200, (url, r.status, await r.text())
        r = await http.get(f"{base}/memory/{top}/rollback?scope=profile&version=1")
        assert r.status == 404  # that user has no version 1: not found, not refused
        # A search key too long for a user id is a session id nobody has.
        page = await (await http.get(f"{base}/search", params={"session": HUGE, "q": "tea"})).text()
        assert f"No session &#39;{HUGE}&#39; (nor a user with that id)" in page
