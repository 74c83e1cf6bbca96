"""The terminal channel (`mnemo chat`): the same pool as Telegram, from a shell.

Lines starting with `/` go to the shared command handler (the local operator is an
admin); end-of-input or `/quit` ends the session. Replies stream when stdout is a
terminal; piped output gets each reply whole, one block per message, which keeps it
easy to script. Every reply and command answer is shown through
`memory.display.terminal_safe` (as streamed, piece by piece): a model or a stored
message can never send control or bidi characters to the terminal.

`Terminal` is the channel (`bot.channel.Channel`) the application root runs for
`mnemo chat`: a stop (SIGINT, SIGTERM) ends the conversation at once, like end of input.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import TextIO

from bot.channel import Limits, unless_stopped
from bot.commands import handle_command
from bot.pool import Pool
from memory.display import terminal_safe
from memory.types import Session

CLI_CHANNEL = "cli"
CLI_USER_ID = 0
QUIT = frozenset({"/quit", "/exit"})
# A terminal takes any length; command listings stay about a screenful, as they were.
LIMITS = Limits(max_message=3900, markdown=False)


def terminal_session(agent_id: str, name: str) -> Session:
    """The base session of terminal conversation `name` (deterministic across runs)."""
    return Session(
        id=f"{agent_id}:{CLI_CHANNEL}:{CLI_USER_ID}:{name}",
        agent_id=agent_id,
        user_id=CLI_USER_ID,
        channel=CLI_CHANNEL,
    )


def _show(out: TextIO, text: str) -> None:
    # Escaping is per character, so escaped pieces of a stream join up as the whole would.
    out.write(terminal_safe(text, multiline=True))


class _Printer:
    """Prints streamed text as it grows; starts over on a new line if it is replaced (a
    retried model call streams from the beginning again)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.shown = ""

    async def __call__(self, text: str) -> None:
        if text.startswith(self.shown):
            _show(self.out, text[len(self.shown) :])
        else:
            _show(self.out, "\n" + text)
        self.shown = text
        self.out.flush()


async def _read_line(loop: asyncio.AbstractEventLoop, stream: TextIO) -> str:
    """One line, read in a daemon thread: the event loop (background compaction) runs on
    meanwhile, and Ctrl-C does not have to wait for the blocked read to finish, as it
    would with the loop's default executor."""
    future: asyncio.Future[str] = loop.create_future()

    def deliver(line: str | None, exc: BaseException | None) -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(line or "")

    def work() -> None:
        try:
            line = stream.readline()
        except BaseException as exc:  # handed to the awaiting coroutine
            loop.call_soon_threadsafe(deliver, None, exc)
        else:
            loop.call_soon_threadsafe(deliver, line, None)

    threading.Thread(target=work, name="mnemo-stdin", daemon=True).start()
    return await future


async def run_terminal(
    pool: Pool,
    base: Session,
    *,
    stdin: TextIO = sys.stdin,
    stdout: TextIO = sys.stdout,
    limit: int = LIMITS.max_message,
) -> int:
    interactive = stdin.isatty() and stdout.isatty()
    loop = asyncio.get_running_loop()
    if interactive:
        stdout.write(f"mnemo chat — session {base.id}. /help for commands, /quit to leave.\n")
    while True:
        if interactive:
            stdout.write("you> ")
            stdout.flush()
        line = await _read_line(loop, stdin)
        if not line:
            break
        text = line.strip()
        if not text:
            continue
        if text.lower() in QUIT:
            break
        if text.startswith("/"):
            name, _, args = text.partition(" ")
            answer = await handle_command(pool, base, name, args, is_admin=True, limit=limit)
            _show(stdout, answer + "\n\n")
            stdout.flush()
            continue
        session = await pool.current_session(base)
        if interactive:
            printer = _Printer(stdout)
            stdout.write("mnemo> ")
            reply = await pool.chat(session, text, on_delta=printer)
            if reply.error or reply.text != printer.shown:
                _show(stdout, ("\n" if printer.shown else "") + reply.text)
            stdout.write("\n\n")
        else:
            reply = await pool.chat(session, text)
            _show(stdout, reply.text + "\n\n")
        stdout.flush()
    return 0


class Terminal:
    """The terminal channel: one conversation, `session`, on the root's pool."""

    name = "terminal"
    limits = LIMITS

    def __init__(
        self,
        pool: Pool,
        session: Session,
        *,
        stdin: TextIO = sys.stdin,
        stdout: TextIO = sys.stdout,
    ) -> None:
        self.pool, self.session, self.stdin, self.stdout = pool, session, stdin, stdout

    async def run(self, stop: asyncio.Event) -> int:
        await unless_stopped(
            run_terminal(
                self.pool,
                self.session,
                stdin=self.stdin,
                stdout=self.stdout,
                limit=self.limits.max_message,
            ),
            stop,
        )
        return 0
