"""`mnemo memory import-chat` killed with SIGKILL part way, then run again: every
message is stored exactly once, in order, and the ledger counts what is stored (each
batch commits with its ledger row, so a kill loses at most the batch in flight, which
the second run stores)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import OperationalError, ProgrammingError

from bot.chat_import.importer import BATCH
from bot.chat_import.ledger import chat_imports
from memory.storage.db import create_engine
from memory.storage.history import conversations, messages
from memory.testing.databases import temp_database_url
from tests.chat_import.generate import telegram_export
from tests.reliability.process import REPO, write_config
from tests.waits import scaled

MESSAGES = 8_000


async def _stored(url: str) -> int:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return int(await conn.scalar(sa.select(sa.func.count()).select_from(messages)) or 0)
    except (OperationalError, ProgrammingError):
        return 0  # not created or migrated yet
    finally:
        await engine.dispose()


async def _start(config: Path, export: Path, tmp: Path) -> asyncio.subprocess.Process:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("MNEMO_CONFIG", None)
    args = ["memory", "import-chat", str(export), "--format", "telegram", "--user", "42"]
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        "--config",
        str(config),
        *args,
        cwd=tmp,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=_default_sigint,
    )


def _default_sigint() -> None:
    # Ctrl-C as a terminal delivers it: a shell's background job (`make test &`, a CI run
    # under nohup) inherits SIGINT ignored, Python then never raises KeyboardInterrupt,
    # and the import ran to its end and exited 0.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(
    "provider",
    ["lcm", pytest.param("simple", marks=pytest.mark.slow)],  # lean `make test`
)
@pytest.mark.slow  # subprocesses: `make test-slow`
async def test_kill_nine_mid_import_then_again_stores_one_copy(
    db_kind: str, tmp_path: Path, provider: str
) -> None:
    export = tmp_path / "result.json"
    expected = telegram_export(export, MESSAGES, chats=2)
    async with temp_database_url(db_kind, tmp_path) as url:
        config = write_config(
            tmp_path / "config.yaml",
            {
                "database": {"url": url},
                "data_dir": str(tmp_path / "data"),
                "memory": {"provider": provider, "simple": {"store_dir": str(tmp_path / "n")}},
            },
        )
        first = await _start(config, export, tmp_path)
        deadline = asyncio.get_running_loop().time() + scaled(60)
        while await _stored(url) < BATCH:
            assert first.returncode is None, (await first.communicate())[1].decode()[-2000:]
            assert asyncio.get_running_loop().time() < deadline, "no batch stored in 60 s (scaled)"
            await asyncio.sleep(0.01)
        first.send_signal(signal.SIGKILL)
        await first.wait()
        killed_at = await _stored(url)
        assert BATCH <= killed_at < expected, f"killed too late: {killed_at} of {expected}"

        second = await _start(config, export, tmp_path)
        out, err = await second.communicate()
        assert second.returncode == 0, err.decode()[-2000:]
        assert f"Imported {expected - killed_at} messages" in out.decode()

        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                rows = (
                    await conn.execute(
                        sa.select(conversations.c.session_id, messages.c.seq, messages.c.content)
                        .join(conversations, conversations.c.id == messages.c.conversation_id)
                        .order_by(conversations.c.session_id, messages.c.seq)
                    )
                ).all()
                ledger = dict(
                    (
                        await conn.execute(
                            sa.select(chat_imports.c.session_id, chat_imports.c.messages)
                        )
                    ).all()
                )
        finally:
            await engine.dispose()
    contents = [r.content for r in rows]
    assert len(contents) == expected
    assert len(set(contents)) == expected  # each generated text is unique: no copy twice
    per_session: dict[str, list[int]] = {}
    for r in rows:
        per_session.setdefault(r.session_id, []).append(r.seq)
    assert sorted(ledger.values()) == sorted(len(v) for v in per_session.values())
    for sid, seqs in per_session.items():
        assert seqs == sorted(seqs)
        # In the export's order: "#<chat>.<i>" ends every text, i increasing.
        tails = [int(r.content.rsplit(".", 1)[1]) for r in rows if r.session_id == sid]
        assert tails == sorted(tails), sid


@pytest.mark.slow  # subprocesses: `make test-slow`
async def test_ctrl_c_mid_import_says_what_is_kept_and_exits_130(tmp_path: Path) -> None:
    export = tmp_path / "result.json"
    expected = telegram_export(export, MESSAGES, chats=1)
    async with temp_database_url("sqlite", tmp_path) as url:
        config = write_config(
            tmp_path / "config.yaml",
            {"database": {"url": url}, "data_dir": str(tmp_path / "data")},
        )
        proc = await _start(config, export, tmp_path)
        while await _stored(url) < BATCH:
            assert proc.returncode is None
            await asyncio.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        _out, err = await proc.communicate()
        assert proc.returncode == 130
        assert "the messages stored so far are kept; run the same command again" in err.decode()
        kept = await _stored(url)
        assert BATCH <= kept < expected
