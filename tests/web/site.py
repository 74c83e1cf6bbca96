"""A populated database and the console served over it, for the web tests.

`populate` writes through the real provider: sessions (one long and compacted, one with
hostile text, one archived), profile versions by reflect and the user, a soul. `serve`
runs the console on the health server's app (port 0), as `mnemo run` does with
`web.port == health.port`."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config.settings import HealthSettings, Settings
from bot.runtime.health import HealthServer
from bot.web.auth import hash_token
from bot.web.console import Console
from memory.compaction.summarizer import TruncatingSummarizer
from memory.contract.capabilities import Provider, ProviderContext
from memory.contract.options import WriteOptions
from memory.contract.registry import create_provider_async
from memory.contract.types import ChangeSource, CompactionMode, Message, Session
from memory.storage.db import write_transaction
from memory.storage.usage import TokenUsage, UsageRow, insert_rows
from tests.ops.conftest import T0, conversation

OPERATOR_TOKEN = "ann-operator-token-0123456789abcdef"
VIEWER_TOKEN = "vic-viewer-token-0123456789abcdef"
# Secrets the config holds: no page may show them.
BOT_TOKEN = "123456:SECRETbotTOKENnever-on-a-page"
API_KEY = "sk-SECRET-api-key-never-on-a-page"
DB_PASSWORD = "SECRET-db-password-never-on-a-page"  # PostgreSQL's trust auth ignores it
SECRETS = (BOT_TOKEN, BOT_TOKEN.split(":")[1], API_KEY, DB_PASSWORD, OPERATOR_TOKEN, VIEWER_TOKEN)


def with_password(url: str) -> str:
    """A PostgreSQL URL carrying a password, as a production one does."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        return url
    return parsed.set(password=DB_PASSWORD).render_as_string(hide_password=False)


ALICE = Session("tg:alice", "default", 1001, "telegram")
BOB = Session("tg:bob", "default", 1002, "telegram")
OLD = Session("tg:carol#old", "default", 1003, "telegram")
HOSTILE = "<script>alert('x')</script> <img src=x onerror=alert(2)> & \"quotes\""


def settings_for(
    url: str, tmp: Path, provider: str, *, keep_tail: int = 4, leaf_chunk_size: int = 4
) -> Settings:
    return Settings.model_validate(
        {
            "database": {"url": with_password(url)},
            "data_dir": str(tmp / "data"),
            "telegram": {"token": BOT_TOKEN},
            "llm": {"api_key": API_KEY, "prices": {"gpt-4o-mini": {"input": 0.15, "output": 0.6}}},
            "memory": {
                "provider": provider,
                "simple": {"store_dir": str(tmp / "notes")},
                "lcm": {"leaf_chunk_size": leaf_chunk_size},
            },
            "compaction": {"keep_tail": keep_tail},
            "web": {
                "enabled": True,
                "operators": [
                    {"name": "ann", "role": "operator", "token_sha256": hash_token(OPERATOR_TOKEN)},
                    {"name": "vic", "role": "viewer", "token_sha256": hash_token(VIEWER_TOKEN)},
                ],
            },
        }
    )


async def open_provider(settings: Settings, engine: AsyncEngine, tmp: Path) -> Provider:
    return await create_provider_async(
        settings.memory.provider,
        ProviderContext(
            engine=engine,
            summarizer=TruncatingSummarizer(),
            data_dir=tmp,
            config=settings.provider_config(),
        ),
    )


RULE = "Never book flights before 9 am."
# A message a page must fold: 5,000 characters, the end marked to find it unfolded.
LONG = "A long letter about the garden. " * 155 + "THE END OF THE LETTER"


async def populate(provider: Any) -> None:
    for s in (ALICE, BOB, OLD):
        await provider.bootstrap(s)
    # Before the compactions, which move Alice's snapshot to the version then current.
    reflect = WriteOptions(ChangeSource.REFLECT, ALICE.id)
    await provider.set_profile(
        1001, "default", "Alice. Likes tea.", WriteOptions(ChangeSource.USER, ALICE.id)
    )
    await provider.set_profile(1001, "default", "Alice. Likes tea.\nWorks at night.", reflect)
    await provider.set_soul(1001, "default", "Warm and brief.", reflect)
    await provider.add_constraint(1001, "default", RULE, reflect)
    await provider.set_profile(1001, "default", "Alice. Likes coffee (wrong).", reflect)
    await provider.append(ALICE, *conversation(30))
    await provider.compact(ALICE, CompactionMode.FULL)
    later = T0 + timedelta(hours=2)
    await provider.append(ALICE, *conversation(12, later))
    await provider.compact(ALICE, CompactionMode.FULL)
    await provider.append(
        BOB,
        Message("user", f"hostile text: {HOSTILE} about the aquarium", created_at=T0),
        Message("assistant", "noted the aquarium", created_at=T0),
    )
    await provider.append(OLD, *conversation(2), Message("user", LONG, created_at=T0))
    async with write_transaction(provider.engine) as conn:  # what two model calls cost
        await insert_rows(
            conn,
            [
                UsageRow(
                    "chat", "gpt-4o-mini", TokenUsage(1200, 200, 80), 1001, "default", ALICE.id
                ),
                UsageRow(
                    "reflect", "gpt-4o-mini", TokenUsage(900, 0, 60), 1001, "default", ALICE.id
                ),
            ],
        )
    info = await provider.load_info(OLD.id)
    info.archived, info.title = True, "an old chat"
    await provider.save_info(info)


@asynccontextmanager
async def serve(
    settings: Settings, engine: AsyncEngine, provider: Provider, console: Console | None = None
) -> AsyncIterator[str]:
    """The console (with /healthz) on a free port; yields its base URL. `console`: one
    made by the test (to look at its parts), else a new one."""
    server = HealthServer(
        engine,
        HealthSettings.model_construct(enabled=True, listen="127.0.0.1", port=0),
        console=console or Console(settings, engine, provider),
    )
    await server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.stop()


_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def client(**connector: Any) -> aiohttp.ClientSession:
    """An HTTP client keeping the cookies of an IP address (127.0.0.1), as a browser does;
    `connector`: aiohttp.TCPConnector's arguments (`local_addr` to log in from another
    loopback address)."""
    return aiohttp.ClientSession(
        cookie_jar=aiohttp.CookieJar(unsafe=True),
        connector=aiohttp.TCPConnector(**connector) if connector else None,
    )


def csrf_of(page: str) -> str:
    m = _CSRF.search(page)
    assert m, "no CSRF token on the page"
    return m.group(1)


async def login(http: aiohttp.ClientSession, base: str, token: str) -> None:
    page = await (await http.get(f"{base}/login")).text()
    r = await http.post(f"{base}/login", data={"token": token, "csrf": csrf_of(page)})
    assert r.status == 200 and r.url.path == "/sessions", await r.text()
