"""A long `mnemo memory compact` as an operator runs it: progress counted in summaries,
Ctrl-C stopping after the current one with every finished summary kept, the next run
continuing, and a run with nothing to do saying so (issue 20, items 2 and 6)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import pytest

from bot.config.settings import load_settings
from bot.ops import doctor
from tests.fakes.openai_server import FakeOpenAI, gated, text
from tests.ops.conftest import ALICE, populate
from tests.waits import scaled

# Each test starts `mnemo` subprocesses: `make test-slow`.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, llm_url: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"database: {{url: 'sqlite+aiosqlite:///{tmp_path}/m.db'}}\n"
        f"llm: {{base_url: '{llm_url}', api_key: test-key, max_retries: 0}}\n"
        "memory: {provider: lcm, lcm: {leaf_chunk_size: 4}}\n"
        "compaction: {keep_tail: 2}\n"
    )
    return path


async def _compact(config: Path, *, interrupt_after: int = 0, llm: FakeOpenAI | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MNEMO_", "OPENAI_"))}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        "--config",
        str(config),
        "memory",
        "compact",
        ALICE.id,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO,
        env=env,
    )
    if interrupt_after and llm is not None:
        await asyncio.wait_for(llm.wait_for_requests(interrupt_after), scaled(30))
        proc.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(proc.communicate(), scaled(60))
    return proc.returncode, out.decode(), err.decode()


async def test_compact_counts_summaries_stops_cleanly_and_continues(tmp_path: Path) -> None:
    async with FakeOpenAI(lambda body: text("a summary")) as llm:
        config = _config(tmp_path, llm.base_url)
        settings = load_settings(config)
        await populate(settings, tmp_path, compact=False)
        # The third summary is in flight when Ctrl-C comes: it finishes, and is kept.
        third = asyncio.Event()
        llm.push(text("summary one"), text("summary two"), gated(third, text("summary three")))
        run = asyncio.create_task(_compact(config, interrupt_after=3, llm=llm))
        await asyncio.wait_for(llm.wait_for_requests(3), scaled(30))
        await asyncio.sleep(0.5)  # the signal reaches the process before the answer
        third.set()
        code, out, err = await run
        assert code == 130, err
        assert "stopping after the current summary; what is done is kept" in err
        stopped = re.search(r"stopped by Ctrl-C: kept 3 summaries of (\d+) messages", err)
        assert stopped, err
        assert "Run the same command again to continue where it stopped." in err
        # The bar counted summaries (not "0/1"), with rate and time left.
        assert re.search(r"\] 2/\d+ summaries \([0-9.]+/s, \S+ left\)", err), err
        assert len(llm.requests) == 3
        assert await doctor.doctor(settings) == 0  # what was kept is consistent

        code, out, err = await _compact(config)  # continues where it stopped
        assert code == 0, err
        assert re.match(rf"compacted 1/1 session\(s\) in {tmp_path}/m.db: \d+ messages", out)
        assert len(llm.requests) > 3

        code, out, err = await _compact(config)  # nothing left: said, with the real size
        assert code == 0, err
        nothing = re.match(
            rf"nothing to compact in 1 session\(s\) in {tmp_path}/m.db \(context (\d+) tokens, ",
            out,
        )
        assert nothing and int(nothing[1]) > 0, out
        assert "0 -> 0" not in out


async def test_embed_backfill_stops_after_the_current_batch_and_continues(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm:
        config = _config(tmp_path, llm.base_url)
        with config.open("a") as f:
            f.write("embeddings: {model: fake-embed, batch_size: 1}\n")
        settings = load_settings(config)
        await populate(settings, tmp_path)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MNEMO_", "OPENAI_"))}
        argv = [sys.executable, "-m", "bot.cli", "--config", str(config), "memory", "embed"]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO, env=env
        )
        await asyncio.wait_for(llm.wait_for_embedding_requests(4), scaled(30))  # probe + 3 batches
        llm.pause()  # the batch now in flight waits for the Ctrl-C
        proc.send_signal(signal.SIGINT)
        await asyncio.sleep(0.5)
        llm.resume()
        out, raw = await asyncio.wait_for(proc.communicate(), scaled(60))
        err = raw.decode()
        assert proc.returncode == 130, err
        kept = re.search(r"stopped by Ctrl-C: (\d+) item\(s\) embedded and kept in ", err)
        assert kept and int(kept[1]) >= 3, err
        assert "Run `mnemo memory embed` again to continue with the rest." in err

        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO, env=env
        )
        out, raw = await asyncio.wait_for(proc.communicate(), scaled(60))
        assert proc.returncode == 0, raw.decode()
        rest = re.match(r"embedded (\d+) item\(s\) with fake-embed", out.decode())
        assert rest and int(rest[1]) > 0, out
