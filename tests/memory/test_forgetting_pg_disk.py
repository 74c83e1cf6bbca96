"""What PostgreSQL keeps of a forgotten word on disk, and `mnemo memory erase --scrub`
taking it off, on a throwaway cluster of our own (the shared server is never touched):
a word in a conversation's title, its messages and an lcm summary is forgotten; after a
plain VACUUM the database's files still hold it (a GIN index among them); after the
scrub as the database's owner (no CHECKPOINT right) no file of the database does, and
after the scrub as a superuser no WAL segment does either (docs/OPERATIONS.md,
"Forgetting and erasure")."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from bot.ops.erase import erase
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import CompactionMode, Message, Session
from memory.storage import forgetting as fg
from memory.storage.db import create_engine, migrate
from tests.fakes.summarizer import KeepingSummarizer
from tests.ops.conftest import make_settings
from tests.reliability import pgcluster
from tests.reliability.corpus import looks_like_traceback

REPO = Path(__file__).resolve().parents[2]
WORD = "Zqxplatypus"
NEEDLE = WORD.lower().encode()
OWNER = fg.Owner(1, "default")
CHAT = Session("tg:1", "default", 1, "telegram")


async def _mnemo(config: Path, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "--config", str(config), *args, cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


def _config(url: str, tmp: Path, name: str) -> Path:
    settings = make_settings(url, tmp, provider="lcm")
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(json.loads(settings.model_dump_json())))
    return path


def _holding(root: Path) -> list[str]:
    """Files under `root` holding the word (case-insensitive, as tsvectors fold it)."""
    return sorted(
        str(f.relative_to(root))
        for f in root.rglob("*")
        if f.is_file() and NEEDLE in f.read_bytes().lower()
    )


async def _remember_and_forget(url: str, tmp: Path) -> None:
    engine = create_engine(url)
    try:
        await migrate(engine)
        ctx = ProviderContext(
            engine=engine,
            summarizer=KeepingSummarizer(),
            data_dir=tmp,
            config={"keep_tail": 2, "leaf_chunk_size": 4},
        )
        provider = create_provider("lcm", ctx)
        await provider.bootstrap(CHAT)
        for i in range(120):  # the word titles the conversation and is summarised
            said = f"the secret {WORD} here" if i in (0, 60) else f"line {i}, number {i * 7}"
            await provider.append(CHAT, Message("user", said), Message("assistant", "noted"))
        await provider.compact(CHAT, CompactionMode.FULL)
        preview = await fg.preview(provider, OWNER, WORD)
        assert (await fg.forget(provider, OWNER, preview.ids, preview.needles)).messages == 2
        await provider.close()
    finally:
        await engine.dispose()


async def _execute(url: str, *statements: str) -> list[object]:
    engine = create_engine(url).execution_options(isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            results = [await conn.execute(sa.text(s)) for s in statements]
            return [r.scalar() if r.returns_rows else None for r in results]
    finally:
        await engine.dispose()


async def _relation_names(url: str) -> dict[str, str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                sa.text(
                    "SELECT pg_relation_filepath(oid), relname FROM pg_class "
                    "WHERE pg_relation_filepath(oid) IS NOT NULL"
                )
            )
            return {path: name for path, name in rows}
    finally:
        await engine.dispose()


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.skipif(not pgcluster.available(), reason="needs initdb and runuser")
async def test_plain_vacuum_keeps_a_forgotten_word_and_scrub_removes_it(tmp_path: Path) -> None:
    cluster = pgcluster.OwnCluster()
    await cluster.init()
    try:
        root = cluster.url.rsplit("/", 1)[0]
        admin = f"{root}/mnemo"  # the superuser, in the bot's database
        await _execute(cluster.url, "CREATE ROLE mnemo LOGIN", "CREATE DATABASE mnemo OWNER mnemo")
        owner_url = admin.replace("postgres@", "mnemo@")
        await _remember_and_forget(owner_url, tmp_path)
        [oid] = await _execute(admin, "SELECT oid FROM pg_database WHERE datname = 'mnemo'")
        database = cluster.data / "base" / str(oid)

        # Plain VACUUM, flushed: the word stays in the database's files, a GIN index too.
        await _execute(owner_url, "VACUUM")
        await _execute(admin, "CHECKPOINT")
        names = await _relation_names(admin)
        kept = [names.get(f"base/{oid}/{f.split('.')[0]}", f) for f in _holding(database)]
        assert any(n.endswith("_gin") for n in kept), kept
        assert "conversations" in kept, kept  # the old title's dead tuple

        # Dry run: says what it would do, does nothing.
        out = io.StringIO()
        settings = make_settings(owner_url, tmp_path, provider="lcm")
        assert await erase(settings, None, None, None, True, out, scrub=True) == 0
        assert "would rewrite" in out.getvalue() and "conversations" in out.getvalue()
        assert _holding(database)

        # As the database's owner: the tables are rewritten, no CHECKPOINT right.
        code, out, err = await _mnemo(
            _config(owner_url, tmp_path, "owner"), "memory", "erase", "--scrub"
        )
        assert code == 0 and not looks_like_traceback(err), err
        assert "rewrote" in out and "the WAL was not reached" in err, (out, err)
        assert _holding(database) == []  # no checkpoint needed: the old files are cut

        # As a superuser: the WAL too; no file of the cluster holds the word any more.
        assert _holding(cluster.data / "pg_wal"), "the WAL held it before"
        config = _config(admin, tmp_path, "admin")
        code, out, err = await _mnemo(config, "memory", "erase", "--scrub")
        assert code == 0 and "set wal_recycle = off" in err, (out, err)  # the default: on
        # Retired segments are deleted, not renamed for reuse with their old bytes.
        await _execute(admin, "ALTER SYSTEM SET wal_recycle = off", "SELECT pg_reload_conf()")
        code, out, err = await _mnemo(config, "memory", "erase", "--scrub")
        assert code == 0 and "every older segment is deleted" in out, (out, err)
        assert _holding(cluster.data) == []
    finally:
        await cluster.destroy()


async def test_scrub_on_sqlite_and_bad_usage(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"
    engine = create_engine(url)
    await migrate(engine)
    await engine.dispose()
    settings = make_settings(url, tmp_path, provider="lcm")
    out = io.StringIO()
    assert await erase(settings, None, None, None, False, out, scrub=True) == 0
    assert out.getvalue().startswith("SQLite: merged the search indexes and checkpoint")
    assert await erase(settings, None, None, None, False, io.StringIO()) == 2
    assert await erase(settings, 1, None, "90d", False, io.StringIO(), scrub=True) == 2
