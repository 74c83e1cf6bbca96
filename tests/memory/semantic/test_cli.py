"""`mnemo memory embed` and `mnemo memory doctor`, on SQLite and PostgreSQL: backfill,
re-run, model change and --prune, a server without embeddings. The first run of each is
a subprocess (the real command line); the others call the same functions in-process,
which is many times faster on a loaded machine."""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path

import pytest
import yaml

from bot.config.settings import load_settings
from bot.ops import doctor
from bot.ops.embeddings import embed_command
from memory.compaction.summarizer import TruncatingSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import Message, Session
from memory.storage.db import create_engine, migrate
from tests.fakes.openai_server import FakeOpenAI, llama_error

REPO = Path(__file__).resolve().parents[3]
ALICE = Session("tg:alice", "default", 1001, "telegram")


def write_config(tmp_path: Path, db_url: str, server: FakeOpenAI, model: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "database": {"url": db_url},
                "data_dir": str(tmp_path / "data"),
                "llm": {
                    "base_url": server.base_url,
                    "api_key": "sk-secret-test-key",
                    "max_retries": 0,
                },
                "memory": {"provider": "lcm"},
                "embeddings": {"model": model, "batch_size": 3},
            }
        )
    )
    return path


async def mnemo(config: Path, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        "--config",
        str(config),
        *args,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert b"sk-secret-test-key" not in out + err
    return proc.returncode or 0, out.decode(), err.decode()


async def in_process(
    config: Path, command: str, *args: str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    settings = load_settings(config)
    out = io.StringIO()
    if command == "doctor":
        code = await doctor.doctor(settings, out=out)
    else:
        code = await embed_command(settings, prune="--prune" in args, out=out)
    return code, out.getvalue(), capsys.readouterr().err


async def populate(db_url: str, tmp_path: Path, n: int) -> None:
    engine = create_engine(db_url)
    try:
        await migrate(engine)
        provider = create_provider(
            "lcm",
            ProviderContext(engine=engine, summarizer=TruncatingSummarizer(), data_dir=tmp_path),
        )
        await provider.append(
            ALICE, *[Message("user", f"message {i} about kites") for i in range(n)]
        )
        await provider.close()
    finally:
        await engine.dispose()


@pytest.mark.slow  # subprocesses: `make test-slow`
async def test_embed_backfills_is_safe_to_rerun_and_doctor_counts(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with FakeOpenAI() as server:
        await populate(db_url, tmp_path, 7)  # 7 messages, 6 pairs with the next: 13 items
        config = write_config(tmp_path, db_url, server, "model-a")
        code, out, err = await mnemo(config, "memory", "doctor")
        assert code == 0
        assert "embeddings: model model-a: embedded 0 of 13 item(s), 13 pending" in out
        code, out, err = await mnemo(config, "memory", "embed")
        assert code == 0, err
        assert "embedded 13 item(s) with model-a (64 dimensions)" in out
        assert "13/13" in err  # progress lines on stderr (not a terminal here)
        code, out, _ = await in_process(config, "embed", capsys=capsys)
        assert code == 0 and "embedded 0 item(s)" in out
        code, out, _ = await in_process(config, "doctor", capsys=capsys)
        assert "embedded 13 of 13 item(s), 0 pending; endpoint ok, 64 dimensions" in out

        # A new model: nothing of it yet, the old vectors are reported, then pruned.
        config = write_config(tmp_path, db_url, server, "model-b")
        code, out, _ = await in_process(config, "doctor", capsys=capsys)
        assert "embedded 0 of 13" in out and "13 vector(s) of other models" in out
        assert "model-a (13)" in out
        code, out, err = await in_process(config, "embed", "--prune", capsys=capsys)
        assert code == 0, err
        assert "embedded 13 item(s) with model-b" in out and "deleted 13 vector(s)" in out
        code, out, _ = await in_process(config, "doctor", capsys=capsys)
        assert "embedded 13 of 13" in out and "other models" not in out


@pytest.mark.slow  # subprocesses: `make test-slow`
async def test_a_server_without_embeddings_is_named_by_embed_and_doctor(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with FakeOpenAI() as server:
        server.embeddings_status = 404
        await populate(db_url, tmp_path, 2)
        config = write_config(tmp_path, db_url, server, "model-a")
        code, out, err = await mnemo(config, "memory", "embed")
        assert code == 1 and "HTTP 404" in err and "Traceback" not in err
        code, out, err = await in_process(config, "doctor", capsys=capsys)
        assert code == 0
        assert "endpoint unavailable" in out and "search is lexical only" in out
        config = write_config(tmp_path, db_url, server, "")
        code, out, _ = await in_process(config, "doctor", capsys=capsys)
        assert "embeddings: off" in out
        code, _, err = await in_process(config, "embed", capsys=capsys)
        assert code == 2 and "embeddings are off" in err


async def test_doctor_shows_the_servers_reason_masked(db_url: str, tmp_path: Path) -> None:
    """llama.cpp started without a pooling type refuses every input with a reason that
    says what to fix: doctor shows it (one line, the key masked: `mnemo` asserts it)."""
    reason = "Pooling type 'none' is not OAI compatible. Please use a different pooling type"
    async with FakeOpenAI() as server:
        refusal = llama_error(400, f"{reason}\n(request by sk-secret-test-key)")
        server.push_embedding(refusal, refusal)  # the request, and the probe telling why
        await populate(db_url, tmp_path, 1)
        code, out, err = await mnemo(
            write_config(tmp_path, db_url, server, "model-a"), "memory", "doctor"
        )
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("embeddings:"))
    assert f"HTTP 400 for model 'model-a': {reason} (request by ***)" in line, line
