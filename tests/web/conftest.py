"""The web tests' fixtures: the fake OpenAI-compatible server of the bot tests (for the
console's end-to-end test) and `site`, the populated console on lcm and simple."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.bot.conftest import llm_server  # noqa: F401 - the fixture, shared
from tests.web.site import open_provider, populate, serve, settings_for


@pytest.fixture(params=["lcm", "simple"])
async def site(
    request: pytest.FixtureRequest, engine: AsyncEngine, tmp_path: Path
) -> AsyncIterator[tuple[str, str]]:
    """The console over `populate`'s data: (base URL, provider name)."""
    settings = settings_for(str(engine.url), tmp_path, request.param)
    provider = await open_provider(settings, engine, tmp_path)
    try:
        await populate(provider)
        async with serve(settings, engine, provider) as base:
            yield base, request.param
    finally:
        await provider.close()
