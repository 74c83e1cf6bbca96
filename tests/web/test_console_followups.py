"""The memory page lists the user's follow-ups (bot/web/reads.py `followups`), escaped,
in their time zone, and no one else's."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.types import Owner
from memory.followups import store
from tests.web.site import ALICE, HOSTILE, VIEWER_TOKEN, client, login


async def test_the_memory_page_lists_the_users_followups(
    site: tuple[str, str], engine: AsyncEngine
) -> None:
    base, _ = site
    await store.add(
        engine,
        Owner(ALICE.user_id, "default"),
        ALICE.id,
        due_at=datetime(2030, 5, 6, 7, tzinfo=UTC),
        timezone="Europe/Berlin",
        text=f"call the notary {HOSTILE}",
        created_by="agent",
    )
    async with client() as http:
        await login(http, base, VIEWER_TOKEN)
        page = await (await http.get(f"{base}/memory/{ALICE.user_id}")).text()
        other = await (await http.get(f"{base}/memory/1002")).text()
    table = page.split('id="followups"')[1].split("</table>")[0]
    assert "Mon 6 May 09:00" in table and "Europe/Berlin" in table and "pending" in table
    assert "call the notary &lt;script&gt;" in table and "<script>" not in table
    assert "No follow-ups." in other.split('id="followups"')[1]
