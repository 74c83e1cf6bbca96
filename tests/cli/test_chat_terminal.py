"""`mnemo chat` on a pseudo-terminal, as a person types into it: line editing with the
arrow keys, history across runs, messages over several lines, and no log line in the
conversation. The fake OpenAI server echoes each message back."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import re
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from bot.channels.terminal import LEFT_UNANSWERED
from tests.bot.test_terminal import mnemo_chat, start_chat, write_config
from tests.fakes.openai_server import FakeOpenAI, error, gated, text
from tests.waits import scaled

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 20  # a loaded machine starts the chat in a few seconds
UP, LEFT = "\x1b[A", "\x1b[D"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]|\r")


class Screen:
    """A process on a pseudo-terminal: what it printed so far, keys sent to it."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        # Its own session, with the terminal as its controlling one: Ctrl-C is a SIGINT
        # from the terminal, as in a shell.
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=REPO,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(slave)
        self.raw = b""
        self.seen = 0  # how much of `text` earlier waits consumed
        self.grew = asyncio.Event()
        asyncio.get_running_loop().add_reader(self.master, self._read)

    def _read(self) -> None:
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # the process closed its side
            chunk = b""
        if not chunk:
            asyncio.get_running_loop().remove_reader(self.master)
        self.raw += chunk
        self.grew.set()

    @property
    def text(self) -> str:
        return ANSI.sub("", self.raw.decode("utf-8", "replace"))

    async def wait_for(self, needle: str) -> str:
        """The output after the previous wait, up to and including `needle`."""
        async with asyncio.timeout(scaled(WAIT_S)):
            while (at := self.text.find(needle, self.seen)) < 0:
                self.grew.clear()
                await self.grew.wait()
        start, self.seen = self.seen, at + len(needle)
        return self.text[start : self.seen]

    def keys(self, text: str) -> None:
        os.write(self.master, text.encode())

    async def close(self) -> int:
        code = await asyncio.to_thread(self.proc.wait, scaled(20))
        self.left = termios.tcgetattr(self.master)  # the terminal's settings it left
        asyncio.get_running_loop().remove_reader(self.master)
        os.close(self.master)
        return code


def chat_screen(cfg: Path) -> Screen:
    """`mnemo chat` on a pseudo-terminal, with no MNEMO_/OPENAI_ setting of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MNEMO_", "OPENAI_"))}
    env.update(OPENAI_API_KEY="test-key", TERM="xterm", INPUTRC="/dev/null")
    return Screen([sys.executable, "-m", "bot.cli", "chat", "--config", str(cfg)], env)


@pytest.fixture
async def server():
    async with FakeOpenAI() as srv:
        yield srv


def _user_messages(server: FakeOpenAI) -> list[str]:
    return [r["messages"][-1]["content"] for r in server.requests]


@pytest.mark.slow  # subprocesses: `make test-slow`
async def test_chat_edits_lines_keeps_history_and_keeps_logs_out(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    cfg = write_config(tmp_path, server.base_url)
    screen = chat_screen(cfg)
    try:
        intro = await screen.wait_for("you> ")
        assert f"Database: {tmp_path / 'mnemo.db'}" in intro
        assert f"Log: {tmp_path / 'data' / 'chat.log'}" in intro
        screen.keys("hello there\r")
        await screen.wait_for("echo: hello there")
        await screen.wait_for("you> ")
        # Up recalls the last message; Left moves into it; the edit is what is sent.
        screen.keys(UP + LEFT * 5 + "out \r")
        await screen.wait_for("echo: hello out there")
        await screen.wait_for("you> ")
        # Two ways to write on several lines: a trailing backslash, and Alt+Enter.
        screen.keys("first line\\\r")
        await screen.wait_for("...> ")
        screen.keys("second line\r")
        await screen.wait_for("echo: first line\nsecond line")
        await screen.wait_for("you> ")
        screen.keys("one\x1b\rtwo\r")
        await screen.wait_for("echo: one\ntwo")
        await screen.wait_for("you> ")
        # A continued message is one history entry: Up, Up recalls it whole.
        screen.keys(UP + UP + "\r")
        await screen.wait_for("echo: first line\nsecond line")
        await screen.wait_for("you> ")
        screen.keys("/quit\r")
        assert await screen.close() == 0
    finally:
        if screen.proc.poll() is None:
            screen.proc.kill()
    assert _user_messages(server) == [
        "hello there",
        "hello out there",
        "first line\nsecond line",
        "one\ntwo",
        "first line\nsecond line",
    ]
    # The log is in its file, never on the screen.
    assert " INFO " not in screen.text and "Traceback" not in screen.text
    assert " INFO " in (tmp_path / "data" / "chat.log").read_text()

    # A second run remembers the first one's lines: Ctrl-R finds "hello out there".
    history = (tmp_path / "data" / "chat_history").read_text()
    assert (
        "hello out there" in history
        and oct((tmp_path / "data" / "chat_history").stat().st_mode)[-3:] == "600"
    )
    screen = chat_screen(cfg)
    try:
        await screen.wait_for("you> ")
        screen.keys("\x12out")
        await screen.wait_for("hello out there")
        screen.keys("\r")
        await screen.wait_for("echo: hello out there")
        await screen.wait_for("you> ")
        # Ctrl-C while typing stops the chat at once, as a shell counts it, and leaves
        # the terminal as it found it (echo on, line mode).
        screen.keys("half typed")
        await screen.wait_for("half typed")
        screen.keys("\x03")
        assert await screen.close() == 130
        lflag = screen.left[3]
        assert lflag & termios.ECHO and lflag & termios.ICANON
    finally:
        if screen.proc.poll() is None:
            screen.proc.kill()
    assert _user_messages(server)[-1] == "hello out there"


@pytest.mark.slow  # subprocesses: `make test-slow`
async def test_ctrl_c_during_an_answer_is_answered_at_the_next_start(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    cfg = write_config(tmp_path, server.base_url)
    server.push(gated(asyncio.Event(), text("never")))  # the model never answers
    screen = chat_screen(cfg)
    try:
        await screen.wait_for("you> ")
        screen.keys("what is two plus two?\r")
        await server.wait_for_requests(1)  # stored; the model is answering
        screen.keys("\x03")
        assert await screen.close() == 130
    finally:
        if screen.proc.poll() is None:
            screen.proc.kill()
    assert "echo:" not in screen.text

    # The next start says so and answers it (on a terminal, streamed); then the chat
    # goes on as usual.
    screen = chat_screen(cfg)
    try:
        said = await screen.wait_for("echo: what is two plus two?")
        assert LEFT_UNANSWERED in said
        await screen.wait_for("you> ")
        screen.keys("and three?\r")
        await screen.wait_for("echo: and three?")
        await screen.wait_for("you> ")
        screen.keys("\x04")
        assert await screen.close() == 0
    finally:
        if screen.proc.poll() is None:
            screen.proc.kill()
    # Answered once: a third start (piped) has nothing left to answer.
    rc, out, _ = await mnemo_chat(cfg, "")
    assert rc == 0
    assert LEFT_UNANSWERED not in out and "echo:" not in out
    assert _user_messages(server) == ["what is two plus two?"] * 2 + ["and three?"]


@pytest.mark.slow  # subprocesses: `make test-slow`
async def test_an_answer_left_that_fails_again_says_so(server: FakeOpenAI, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, server.base_url)
    server.push(gated(asyncio.Event(), text("never")))
    proc = await start_chat(cfg, output=asyncio.subprocess.DEVNULL)
    assert proc.stdin is not None
    proc.stdin.write(b"is anyone there?\n")
    await proc.stdin.drain()
    await server.wait_for_requests(1)
    proc.kill()  # as a kill -9 during the answer
    await proc.wait()

    server.push(error(500), error(500))  # the model fails the resumed answer (max_retries 1)
    rc, out, _ = await mnemo_chat(cfg, "")
    assert rc == 0
    assert LEFT_UNANSWERED in out and "Sorry" in out and "echo:" not in out
    rc, out, _ = await mnemo_chat(cfg, "")  # still owed: answered at the next start
    assert LEFT_UNANSWERED in out and "echo: is anyone there?" in out
