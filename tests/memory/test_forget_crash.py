"""A forget killed (SIGKILL) inside its transaction leaves the old state whole: every
summary still points at its sources, doctor is clean, and forgetting again finishes the
job. lcm and simple, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import CompactionMode, Message, Session
from memory.storage import forgetting as fg
from memory.storage.db import create_engine
from memory.storage.forgetting import Owner
from memory.transfer.integrity import check_shared
from tests.fakes.summarizer import KeepingSummarizer
from tests.waits import scaled

REPO = Path(__file__).resolve().parents[2]
TOKEN = "Zcrashtoken"
S = Session("tg-9", "default", 9)

CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from memory.storage import forgetting as fg
    from memory.contract.capabilities import ProviderContext
    from memory.storage.db import create_engine
    from memory.contract.registry import create_provider
    from tests.fakes.summarizer import KeepingSummarizer

    url, name, config = sys.argv[1], sys.argv[2], eval(sys.argv[3])
    real = fg.delete_messages

    async def stuck(conn, conv_id, ids):
        count = await real(conn, conv_id, ids)
        print("inside the transaction", flush=True)
        await asyncio.sleep(120)  # killed here
        return count

    fg.delete_messages = stuck

    async def main():
        engine = create_engine(url)
        ctx = ProviderContext(engine=engine, summarizer=KeepingSummarizer(), config=config)
        provider = create_provider(name, ctx)
        preview = await fg.preview(provider, fg.Owner(9, "default"), sys.argv[4])
        await fg.forget(provider, preview.owner, preview.ids, preview.needles)

    asyncio.run(main())
    """
)


def _config(name: str, tmp_path: Path) -> dict[str, object]:
    if name == "lcm":
        return {"keep_tail": 4, "leaf_chunk_size": 4, "condensed_min": 2}
    return {"keep_tail": 4, "store_dir": str(tmp_path / "mem")}


async def _state(provider, engine: AsyncEngine) -> tuple[list[str], list, list]:  # type: ignore[no-untyped-def]
    history = [m.content for m in await provider.load_history(S.id)]
    return history, await check_shared(engine), await provider.check_integrity()


@pytest.mark.slow  # a subprocess per case
@pytest.mark.parametrize("name", ["lcm", "simple"])
async def test_kill_mid_forget_leaves_the_old_state(
    engine: AsyncEngine, tmp_path: Path, name: str
) -> None:
    config = _config(name, tmp_path)
    provider = create_provider(
        name, ProviderContext(engine=engine, summarizer=KeepingSummarizer(), config=config)
    )
    chat = [Message("user" if i % 2 == 0 else "assistant", f"m{i} Zw{i}") for i in range(24)]
    chat[5] = Message("assistant", f"m5 {TOKEN}")
    await provider.append(S, *chat[:12])
    await provider.compact(S, CompactionMode.FULL)
    await provider.append(S, *chat[12:])
    await provider.compact(S, CompactionMode.FULL)
    before = await _state(provider, engine)
    assert before[1:] == ([], [])
    await provider.close()

    url = engine.url.render_as_string(hide_password=False)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        url,
        name,
        repr(config),
        TOKEN,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert child.stdout is not None
    try:
        line = await asyncio.wait_for(child.stdout.readline(), scaled(60))
        assert line == b"inside the transaction\n", (line, await child.stderr.read())  # type: ignore[union-attr]
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()

    fresh = create_engine(url)
    try:
        provider = create_provider(
            name, ProviderContext(engine=fresh, summarizer=KeepingSummarizer(), config=config)
        )
        assert await _state(provider, fresh) == before  # the old state, whole
        owner = Owner(S.user_id, S.agent_id)
        preview = await fg.preview(provider, owner, TOKEN)
        report = await fg.forget(provider, owner, preview.ids, preview.needles)
        assert report.messages == 1
        history, shared, own = await _state(provider, fresh)
        assert history == [c for c in before[0] if TOKEN not in c]
        assert shared == [] and own == []
        await provider.close()
    finally:
        await fresh.dispose()
