"""`build_services` and `Services.close`: whatever was built is closed, also when a
later step fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import bot.app.services
from bot.app.services import build_services
from bot.model.client import LLMClient
from memory.contract.registry import create_provider_async
from tests.bot.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI


class Closings:
    """Records what got closed, by name."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.closed: list[str] = []
        closings = self

        class RecordingLLMClient(LLMClient):
            async def close(self) -> None:
                closings.closed.append("llm")
                await super().close()

        async def recording_create_provider(name: str, ctx: Any) -> Any:
            provider = await create_provider_async(name, ctx)
            close = provider.close

            async def recorded_close() -> None:
                closings.closed.append("provider")
                await close()

            provider.close = recorded_close
            return provider

        monkeypatch.setattr(bot.app.services, "LLMClient", RecordingLLMClient)
        monkeypatch.setattr(bot.app.services, "create_provider_async", recording_create_provider)


def lcm_settings(llm_server: FakeOpenAI, tmp_path: Path):
    return make_settings(
        llm_server,
        tmp_path / "data",
        memory={"provider": "lcm"},
        database={"url": f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"},
    )


async def test_a_provider_that_fails_to_build_leaves_the_llm_client_closed(
    llm_server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    closings = Closings(monkeypatch)

    async def broken_factory(name: str, ctx: Any) -> Any:
        raise RuntimeError("the provider's configuration is wrong")

    monkeypatch.setattr(bot.app.services, "create_provider_async", broken_factory)
    with pytest.raises(RuntimeError, match="configuration is wrong"):
        await build_services(lcm_settings(llm_server, tmp_path))
    assert closings.closed == ["llm"]


async def test_a_failure_after_the_provider_closes_it_and_the_llm_client(
    llm_server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    closings = Closings(monkeypatch)

    def no_locks(engine: Any) -> Any:
        raise RuntimeError("no turn locks today")

    monkeypatch.setattr(bot.app.services, "SessionLocks", no_locks)
    with pytest.raises(RuntimeError, match="no turn locks"):
        await build_services(lcm_settings(llm_server, tmp_path))
    assert closings.closed == ["provider", "llm"]  # newest first


async def test_close_goes_on_when_the_pool_fails_to_close(
    llm_server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    closings = Closings(monkeypatch)
    services = await build_services(lcm_settings(llm_server, tmp_path))

    async def pool_close() -> None:
        raise RuntimeError("pool close failed")

    monkeypatch.setattr(services.conversations, "close", pool_close)
    with pytest.raises(RuntimeError, match="pool close failed"):
        await services.close()
    assert closings.closed == ["provider", "llm"]


async def test_a_threshold_over_the_budget_is_warned_about(
    llm_server: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(
        llm_server,
        tmp_path / "data",
        memory={"provider": "lcm", "budget_tokens": 8000},
        compaction={"max_tokens": 12000},
        database={"url": f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"},
    )
    app = await build_services(settings)
    await app.close()
    assert "compaction.max_tokens (12000) is not below memory.budget_tokens (8000)" in caplog.text
    caplog.clear()
    app = await build_services(lcm_settings(llm_server, tmp_path))  # max_tokens -1: off
    await app.close()
    assert "is not below memory.budget_tokens" not in caplog.text
