"""A channel added from outside the product: declared here, registered with one line,
named in `channels:` and run by `mnemo run`'s own composition (bot.app.run), with no
product file touched. It says one scripted line through the conversations and keeps
the answer, then ends, which ends the run."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.app.run import run_channels, start_problems
from bot.channels.base import ChannelPlugin, Limits
from bot.channels.registry import CHANNELS, register
from bot.config.settings import ConfigError, load_settings
from memory.contract.types import Session
from tests.fakes.openai_server import FakeOpenAI

SCRIPT = "hello from a channel of my own"
ANSWERS: list[str] = []
ERASE_HOOKS: list[str] = []
SPEAKER = Session("default:demo:5", "default", 5, "demo")


class Demo:
    """The demo channel: one scripted message, its answer kept in ANSWERS."""

    name = "demo"
    limits = Limits(max_message=500, markdown=False)

    def __init__(self, services: object) -> None:
        self.conversations = services.conversations  # type: ignore[attr-defined]

    async def run(self, stop: asyncio.Event) -> int:
        session = await self.conversations.current_session(SPEAKER)
        ANSWERS.append((await self.conversations.chat(session, SCRIPT)).text)
        return 0  # ended by itself: the root stops and closes everything


def register_erase_hook() -> None:
    ERASE_HOOKS.append("demo")  # a real channel calls memory.storage.forgetting.on_erase


DEMO = ChannelPlugin(
    "demo",
    factory=f"{__name__}:Demo",
    erase=f"{__name__}:register_erase_hook",
    check=lambda section: None,
)


@pytest.fixture
def demo_registered():
    register(DEMO)  # the one registration line (bot/channels/registry.py holds the others)
    yield
    CHANNELS.pop(DEMO.name)


def write_config(tmp_path: Path, llm: FakeOpenAI, channels: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(f"""
channels: {channels}
database: {{url: "sqlite+aiosqlite:///{tmp_path}/mnemo.db"}}
data_dir: {tmp_path}/data
llm: {{base_url: "{llm.base_url}", api_key: test-key, max_retries: 0}}
memory: {{provider: simple, simple: {{store_dir: "{tmp_path}/data/memory"}}}}
reflect: {{enabled: false}}
""")
    return path


async def test_a_registered_channel_runs_through_the_real_root(
    tmp_path: Path, demo_registered: None
) -> None:
    ANSWERS.clear()
    ERASE_HOOKS.clear()
    async with FakeOpenAI() as llm:
        settings = load_settings(write_config(tmp_path, llm, "[demo]"))
        assert settings.channels == ["demo"]
        assert start_problems(settings) == []  # no Telegram token asked for
        async with asyncio.timeout(60):
            assert await run_channels(settings) == 0
    assert len(ANSWERS) == 1 and SCRIPT in ANSWERS[0]  # the fake model echoes
    assert ERASE_HOOKS == ["demo"]  # an erasure would reach the channel's rows


async def test_an_unknown_channel_is_one_line_naming_the_known_ones(tmp_path: Path) -> None:
    async with FakeOpenAI() as llm:
        with pytest.raises(ConfigError) as info:
            load_settings(write_config(tmp_path, llm, "[telegram, demo]"))
    (line,) = str(info.value).splitlines()
    assert "channels: unknown channel 'demo'; known: telegram, terminal" in line
