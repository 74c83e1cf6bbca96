"""The console with NUL in what it is asked (a search, a session id in the query or the
path), on both databases: an answer, never a server error (the text reaches SQL cleaned,
memory/sanitize.py). A lone surrogate cannot arrive over HTTP: the URL's decoder already
turns one into U+FFFD."""

from __future__ import annotations

import aiohttp
import pytest

from memory.types import SearchMode
from tests.web.site import VIEWER_TOKEN
from tests.web.test_console_http import client, login, site  # noqa: F401 - the fixture

NUL = "%00"


async def _get(http: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    r = await http.get(url)
    return r.status, await r.text()


@pytest.mark.parametrize("mode", [m.value for m in SearchMode])
async def test_search_with_nul(site: tuple[str, str], mode: str) -> None:  # noqa: F811
    base, _ = site
    async with client() as http:
        await login(http, base, VIEWER_TOKEN)
        status, page = await _get(
            http, f"{base}/search?session=tg:bob&q=aquarium{NUL}&mode={mode}&scope=both"
        )
        assert status == 200 and "aquarium" in page, status
        status, page = await _get(
            http, f"{base}/search?session=tg:bob{NUL}&q=aquarium&mode={mode}&scope=both"
        )
        assert status == 200 and "No session" in page, status


async def test_pages_named_by_a_session_id_with_nul(site: tuple[str, str]) -> None:  # noqa: F811
    base, _ = site
    async with client() as http:
        await login(http, base, VIEWER_TOKEN)
        for path in (f"/sessions/tg:bob{NUL}", f"/sessions/tg:bob{NUL}/graph"):
            status, _page = await _get(http, base + path)
            assert status == 404, (path, status)
        status, page = await _get(http, f"{base}/sessions?q=bob{NUL}")
        assert status == 200 and "tg:bob" not in page, status
