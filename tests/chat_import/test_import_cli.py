"""`mnemo memory import-chat` on both providers and both databases: the dry run counts
and writes nothing, the import stores each chat as an archived session of that user
with the original times, a second import adds nothing, a malformed file is refused in
one line writing nothing, and another user's memory never shows any of it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bot.chat_import.ledger import chat_imports
from bot.cli import main
from memory.compaction.summarizer import TruncatingSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import ListOptions, SearchQuery, SearchScope, Session
from memory.storage.db import create_engine
from memory.storage.history import conversations, messages
from tests.ops.conftest import make_settings
from tests.reliability.process import write_config

FIXTURES = Path(__file__).parent / "fixtures"
ALICE, MALLORY = 42, 43


@pytest.fixture(params=["lcm", "simple"])
def provider_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _config(url: str, tmp: Path, provider: str) -> Path:
    settings = make_settings(url, tmp, provider)
    raw: dict[str, Any] = {
        "database": {"url": url},
        "data_dir": settings.data_dir,
        "memory": {"provider": provider, "simple": {"store_dir": str(tmp / "notes")}},
    }
    return write_config(tmp / "config.yaml", raw)


def _cli(config: Path, *args: str) -> int:
    return main(["--config", str(config), "memory", "import-chat", *args])


async def _counts(url: str) -> tuple[int, int, int]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return tuple(  # type: ignore[return-value]
                [
                    await conn.scalar(sa.select(sa.func.count()).select_from(t)) or 0
                    for t in (conversations, messages, chat_imports)
                ]
            )
    finally:
        await engine.dispose()


async def _provider(url: str, tmp: Path, name: str) -> tuple[Any, Any]:
    engine = create_engine(url)
    settings = make_settings(url, tmp, name)
    ctx = ProviderContext(
        engine=engine,
        summarizer=TruncatingSummarizer(),
        agent_id="default",
        data_dir=tmp,
        config={**settings.provider_config(), "store_dir": str(tmp / "notes")},
    )
    return engine, create_provider(name, ctx)


def test_telegram_account_export_dry_run_import_and_reimport(
    db_url: str, tmp_path: Path, provider_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    config = _config(db_url, tmp_path, provider_name)
    export = str(FIXTURES / "telegram_account.json")
    args = (export, "--format", "telegram", "--user", str(ALICE))

    assert _cli(config, *args, "--dry-run") == 0
    out = capsys.readouterr().out
    assert "3 chats, 6 messages (2019-02-01 .. 2023-05-01)" in out
    assert "• Family: 3 messages, 2022-12-24 .. 2022-12-24, 3 new" in out
    assert "Dry run: nothing was written." in out
    assert asyncio.run(_counts(db_url)) == (0, 0, 0)

    assert _cli(config, *args) == 0
    assert "Imported 6 messages into 3 archived conversations" in capsys.readouterr().out
    assert asyncio.run(_counts(db_url)) == (3, 6, 3)

    assert _cli(config, *args) == 0  # the same file again: nothing new
    out = capsys.readouterr().out
    assert "Nothing new: everything in it is imported already." in out
    assert asyncio.run(_counts(db_url)) == (3, 6, 3)

    asyncio.run(_check_stored(db_url, tmp_path, provider_name))


async def _check_stored(url: str, tmp: Path, name: str) -> None:
    engine, provider = await _provider(url, tmp, name)
    try:
        infos = await provider.list_info(ListOptions(user_id=ALICE, include_archived=True))
        assert sorted(i.title for i in infos) == [
            "Telegram: Bob",
            "Telegram: Family",
            "Telegram: Old Book Club",
        ]
        assert all(i.archived and i.channel == "import" for i in infos)
        family = next(i for i in infos if i.title == "Telegram: Family")
        history = await provider.load_history(family.id)
        assert [(m.role, m.content) for m in history] == [
            ("user", "[Mum] Dinner is at 7, Alice please bring the lemon tart"),
            (
                "user",
                '[Alice, replying to Mum: "Dinner is at 7, Alice please bring the…"] '
                "_of course_ — with extra zest",
            ),
            ("user", "[Deleted Account] [poll: Board game after dinner?]"),
        ]
        assert history[0].created_at.astimezone(UTC) == datetime(2022, 12, 24, 18, 1, tzinfo=UTC)
        # Alice's memory finds it; another user's never does.
        alice = Session("default:telegram:42", "default", ALICE, "telegram")
        mallory = Session("default:telegram:43", "default", MALLORY, "telegram")
        query = SearchQuery("lemon tart", scope=SearchScope.MESSAGES)
        hits = await provider.search(alice, query)
        assert any("lemon tart" in h.content for h in hits)
        assert await provider.search(mallory, query) == []
        assert await provider.list_info(ListOptions(user_id=MALLORY, include_archived=True)) == []
    finally:
        await provider.close()
        await engine.dispose()


def test_chatgpt_export_follows_the_current_branch_and_keeps_roles(
    db_url: str, tmp_path: Path, provider_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    config = _config(db_url, tmp_path, provider_name)
    export = str(FIXTURES / "chatgpt.json")
    args = (export, "--format", "chatgpt", "--user", str(ALICE), "--chat", "Sourdough starter")
    assert _cli(config, *args) == 0
    out = capsys.readouterr().out
    assert "1 other conversation in the file left out" in out
    assert "Imported 4 messages into 1 archived conversation in" in out

    async def check() -> None:
        engine, provider = await _provider(db_url, tmp_path, provider_name)
        try:
            [info] = await provider.list_info(ListOptions(user_id=ALICE, include_archived=True))
            history = await provider.load_history(info.id)
            assert [m.role for m in history] == ["user", "assistant", "user", "assistant"]
            text = "\n".join(m.content for m in history)
            assert "ABANDONED BRANCH" not in text  # the branch left by an edit
            assert "print(100 * 0.8)" not in text and "80.0" not in text  # tool traffic
            assert "[image]\nHere is a photo" in text
            assert history[-1].content.startswith("Use 80 g of water")
        finally:
            await provider.close()
            await engine.dispose()

    asyncio.run(check())
    # The other conversation later: only it is added.
    assert _cli(config, export, "--format", "chatgpt", "--user", str(ALICE)) == 0
    assert "Imported 2 messages into 1 archived conversation in" in capsys.readouterr().out
    assert asyncio.run(_counts(db_url)) == (2, 6, 2)


@pytest.mark.parametrize(
    ("name", "fmt", "says"),
    [
        ("telegram_bad_date.json", "telegram", "chat 'Bob', message 2: date: Input should be"),
        ("telegram_truncated.json", "telegram", "is not valid JSON: parse error"),
        ("chatgpt_cycle.json", "chatgpt", "conversation 1 ('Loop'): the parents of 'x' loop"),
        ("chatgpt_no_mapping.json", "chatgpt", "conversation 2 ('Missing'): mapping: Field"),
        ("not_an_export.json", "telegram", "no chat in it: is it a Telegram Desktop export"),
        ("telegram_chat.json", "chatgpt", "no conversation in it"),
    ],
)
def test_a_malformed_export_is_refused_in_one_line_and_nothing_is_written(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, fmt: str, says: str
) -> None:
    import asyncio

    config = _config(db_url, tmp_path, "lcm")
    assert _cli(config, str(FIXTURES / name), "--format", fmt, "--user", str(ALICE)) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"mnemo: import refused, nothing was written: {name}"), err
    assert says in err
    assert asyncio.run(_counts(db_url)) == (0, 0, 0)


HOSTILE_CHATGPT = [
    {
        "title": "odd \u202e ids",
        "conversation_id": "x#1/" + "y" * 400,
        "current_node": "n" * 300 + "#",
        "mapping": {
            "n" * 300 + "#": {
                "message": {
                    "author": {"role": "user"},
                    "create_time": 1700000000,
                    "content": {"content_type": "text", "parts": ["nul \u0000 and \ud800 lone"]},
                },
                "parent": None,
            }
        },
    }
]


def test_odd_ids_and_characters_from_a_hand_made_file_are_stored_safely(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio
    import json

    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(HOSTILE_CHATGPT), encoding="utf-8")
    config = _config(db_url, tmp_path, "lcm")
    assert _cli(config, str(path), "--format", "chatgpt", "--user", str(ALICE)) == 0
    assert _cli(config, str(path), "--format", "chatgpt", "--user", str(ALICE)) == 0
    assert "Nothing new" in capsys.readouterr().out
    assert asyncio.run(_counts(db_url)) == (1, 1, 1)


def test_a_time_that_is_no_date_is_refused(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    raw = json.loads((FIXTURES / "telegram_chat.json").read_text(encoding="utf-8"))
    raw["messages"][0]["date_unixtime"] = "99999999999999999"
    path = tmp_path / "result.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    config = _config(db_url, tmp_path, "lcm")
    assert _cli(config, str(path), "--format", "telegram", "--user", str(ALICE)) == 1
    assert "chat 'Bob', message 10: date_unixtime: 99999999999999999 is not a time" in (
        capsys.readouterr().err
    )


def test_a_newer_export_adds_only_what_is_newer_and_an_edited_branch_is_left_alone(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio
    import json

    config = _config(db_url, tmp_path, "lcm")
    raw = json.loads((FIXTURES / "telegram_chat.json").read_text(encoding="utf-8"))
    path = tmp_path / "result.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    assert _cli(config, str(path), "--format", "telegram", "--user", str(ALICE)) == 0
    later = {**raw["messages"][0], "id": 18, "text": "back home, what a trip"}
    raw["messages"].append(later)
    path.write_text(json.dumps(raw), encoding="utf-8")
    capsys.readouterr()
    assert _cli(config, str(path), "--format", "telegram", "--user", str(ALICE)) == 0
    assert "• Bob: 7 messages, 2023-05-01 .. 2023-05-01, 1 new" in capsys.readouterr().out
    assert asyncio.run(_counts(db_url)) == (1, 7, 1)

    conv = json.loads((FIXTURES / "chatgpt.json").read_text(encoding="utf-8"))[:1]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(conv), encoding="utf-8")
    assert _cli(config, str(path), "--format", "chatgpt", "--user", str(ALICE)) == 0
    conv[0]["current_node"] = "a2old"  # the user went back to the other branch
    path.write_text(json.dumps(conv), encoding="utf-8")
    capsys.readouterr()
    assert _cli(config, str(path), "--format", "chatgpt", "--user", str(ALICE)) == 0
    out = capsys.readouterr().out
    assert "changed since it was imported (edited or regenerated): left as imported" in out
    assert asyncio.run(_counts(db_url)) == (2, 11, 2)
