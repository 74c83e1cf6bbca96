"""`create_provider_async`: from a coroutine, an object a factory returned that is not a
Provider is closed (its async close awaited, on the caller's loop) before the refusal
reaches the caller, who may then dispose of the engine it used."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory.contract.registry import ProviderLoadError, create_provider, create_provider_async
from tests.memory.test_registry import ACME, install

MODULE = "acme_async_leaky"

SOURCE = '''
import asyncio

from memory.contract.registry import ProviderPlugin

made = []


class SlowClose:
    """Not a Provider; its close takes several loop turns, like closing a pool."""

    def __init__(self):
        self.closed_on = None  # the loop the close finished on
        made.append(self)

    async def close(self):
        for _ in range(5):
            await asyncio.sleep(0)
        self.closed_on = asyncio.get_running_loop()


class FailingClose:
    async def close(self):
        await asyncio.sleep(0)
        raise RuntimeError("the plugin cannot even close")


class SyncClose:
    def __init__(self):
        self.closed = False
        made.append(self)

    def close(self):
        self.closed = True


create = ProviderPlugin("slow", lambda ctx: SlowClose())
create_failing = ProviderPlugin("slow-failing", lambda ctx: FailingClose())
create_sync = ProviderPlugin("slow-sync", lambda ctx: SyncClose())
'''


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    site = tmp_path / "async-site"
    install(
        site,
        "async-leaky-memory",
        "1.0",
        {
            "slow": f"{MODULE}:create",
            "slow-failing": f"{MODULE}:create_failing",
            "slow-sync": f"{MODULE}:create_sync",
            "fine": "acme_async_fine:create",
        },
        {MODULE: SOURCE, "acme_async_fine": ACME},
    )
    monkeypatch.syspath_prepend(str(site))
    yield lambda: sys.modules[MODULE]
    for name in (MODULE, "acme_async_fine"):
        sys.modules.pop(name, None)


async def test_the_close_has_finished_when_the_refusal_is_caught(plugin: Any) -> None:
    try:
        await create_provider_async("slow", ctx=None)  # type: ignore[arg-type]
    except ProviderLoadError as exc:
        # Checked here, before this coroutine yields to the loop again.
        assert str(exc) == "memory provider 'slow' does not implement Provider"
        assert plugin().made[-1].closed_on is asyncio.get_running_loop()
    else:
        pytest.fail("a non-Provider was accepted")


async def test_the_sync_variant_in_a_loop_only_schedules_the_close(plugin: Any) -> None:
    # Why the async variant exists: the sync one cannot wait inside a running loop.
    with pytest.raises(ProviderLoadError):
        create_provider("slow", ctx=None)  # type: ignore[arg-type]
    made = plugin().made[-1]
    assert made.closed_on is None
    for _ in range(100):  # let the scheduled close finish before the loop is closed
        if made.closed_on is not None:
            break
        await asyncio.sleep(0)
    assert made.closed_on is asyncio.get_running_loop()


async def test_a_synchronous_close_is_called(plugin: Any) -> None:
    with pytest.raises(ProviderLoadError, match="'slow-sync' does not implement Provider"):
        await create_provider_async("slow-sync", ctx=None)  # type: ignore[arg-type]
    assert plugin().made[-1].closed


async def test_a_failing_close_is_logged_and_the_refusal_raised(
    plugin: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ProviderLoadError, match="'slow-failing' does not implement Provider"):
        await create_provider_async("slow-failing", ctx=None)  # type: ignore[arg-type]
    assert "the plugin cannot even close" in caplog.text


async def test_a_provider_is_returned(plugin: Any) -> None:
    provider = await create_provider_async("fine", ctx="the context")  # type: ignore[arg-type]
    assert provider.name == "acme" and provider.ctx == "the context"
