"""`mnemo memory ...` with bytes that are not UTF-8 on its command line (Python hands
them over as lone surrogates; NUL cannot be in an argument) on both databases: each
command answers in one clear line, never with a traceback, and a search finds the text
stored from a lone surrogate (both become U+FFFD, memory/text/sanitize.py)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import yaml

from memory.compaction.summarizer import TruncatingSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import Message
from memory.storage.db import create_engine
from tests.ops.conftest import ALICE, make_settings, populate
from tests.reliability.corpus import looks_like_traceback

REPO = Path(__file__).resolve().parents[2]
BROKEN = b"\xff"  # not UTF-8: the child's sys.argv holds it as the lone surrogate U+DCFF


async def _mnemo(config: Path, *args: str | bytes) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "--config", str(config), *args, cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


async def test_memory_commands_with_a_lone_surrogate(db_url: str, tmp_path: Path) -> None:
    settings = make_settings(db_url, tmp_path, provider="lcm")
    await populate(settings, tmp_path, compact=False)
    engine = create_engine(settings.database.url)
    try:
        ctx = ProviderContext(engine=engine, summarizer=TruncatingSummarizer(), config={})
        provider = create_provider("lcm", ctx)
        await provider.append(ALICE, Message("user", "the code is Zqx\udcffcode ok"))
        await provider.close()
    finally:
        await engine.dispose()
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(json.loads(settings.model_dump_json())))

    bad_session = ALICE.id.encode() + BROKEN
    # Read-only commands (erase is a dry run): run at once.
    found, unknown, erase = await asyncio.gather(
        _mnemo(config, "memory", "search", ALICE.id, b"Zqx" + BROKEN + b"code"),
        _mnemo(config, "memory", "search", bad_session, "code"),
        _mnemo(config, "memory", "erase", "--user", "1001", "--agent", b"default" + BROKEN,
               "--dry-run"),
    )  # fmt: skip
    code, out, err = found
    assert code == 0, err
    assert "the code is Zqx\ufffdcode ok" in out and "1 result(s)" in err
    code, out, err = unknown
    assert code != 0 and not looks_like_traceback(err), err
    assert "no session 'tg:alice\\udcff'" in err, err
    code, out, err = erase
    assert code == 0 and not looks_like_traceback(err), err
    assert "0 session(s), 0 message(s)" in out, out
