"""The terminal channel (`mnemo chat`): the same conversation service as Telegram, from a shell.

Lines starting with `/` go to the shared command handler (the local operator is an
admin); end-of-input or `/quit` ends the session. Replies stream when stdout is a
terminal; piped output gets each reply whole, one block per message, which keeps it
easy to script. Every reply and command answer is shown through
`memory.text.display.terminal_safe` (as streamed, piece by piece): a model or a stored
message can never send control or bidi characters to the terminal.

A message whose answer was cut off (Ctrl-C or a kill during the answer: the message is
stored before the model answers) is answered when the conversation is opened again,
after a line saying so (`answer_left`); if that answer fails too, its apology says so.

`Terminal` is the channel (`bot.channels.base.Channel`) the application root runs for
`mnemo chat`: a stop (SIGINT, SIGTERM) ends the conversation at once, like end of input.

On a terminal, input is read with the standard library's readline (GNU readline or
libedit, whichever Python was built with): arrow keys, Emacs-style editing, Ctrl-R, and a
history kept across runs (`LineEditor`). prompt_toolkit would add a multi-line editor,
but it is a dependency for one command, and it answers a terminal's cursor-position
requests on its own schedule, which makes the chat harder to script and to test under a
pseudo-terminal; readline covers what people expect of a shell-like prompt. A message
spans several lines with Alt+Enter (Esc, Enter) or a line ending in a backslash; a
pasted block (bracketed paste, on by default in readline 8.1+) stays one message. The
CLI sends log lines to a file meanwhile (bot.cli), so none lands in the prompt.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from bot.channels.base import Limits, unless_stopped
from bot.conversation.commands import handle_command
from bot.conversation.service import Conversations, Reply
from memory.actions.provenance import plain_sources
from memory.contract.types import Session
from memory.text.display import terminal_safe

CLI_CHANNEL = "cli"
CLI_USER_ID = 0
QUIT = frozenset({"/quit", "/exit"})
LEFT_UNANSWERED = "Your last message was not answered before the chat stopped; answering it now:"
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


PROMPT, MORE = "you> ", "...> "
HISTORY_LENGTH = 1000  # entries kept in the history file


class LineEditor:
    """Lines read with readline from the terminal: editing, history across runs (in
    `history`, when given), Alt+Enter for a new line inside the message."""

    def __init__(self, history: Path | None) -> None:
        import readline

        self._readline = readline
        self.history = history
        if "libedit" not in (readline.__doc__ or ""):
            # Esc-Enter (what Alt+Enter sends) inserts a newline instead of sending.
            readline.parse_and_bind(r'"\e\r": "\C-v\C-j"')
        readline.set_history_length(HISTORY_LENGTH)
        # One history entry per message, not per line typed (a continued message is one).
        readline.set_auto_history(False)
        if history is not None and history.exists():
            try:
                readline.read_history_file(history)
            except OSError:  # unreadable: start a fresh history, never fail the chat
                self.history = None

    def read(self) -> str | None:
        """One message (several lines when continued), or None at end of input."""
        lines: list[str] = []
        prompt = PROMPT
        while True:
            try:
                line = input(prompt)
            except EOFError:
                return "\n".join(lines) if lines else None
            if line.endswith("\\"):
                lines.append(line[:-1])
                prompt = MORE
                continue
            lines.append(line)
            text = "\n".join(lines)
            self._remember(text)
            return text

    def _remember(self, text: str) -> None:
        if not text.strip():
            return
        self._readline.add_history(text)
        if self.history is None:
            return
        try:
            self.history.parent.mkdir(parents=True, exist_ok=True)
            if not self.history.exists():
                self.history.touch(mode=0o600)  # what you typed is yours alone to read
            self._readline.append_history_file(1, self.history)
        except OSError:
            self.history = None  # a full or read-only disk costs the history, not the chat


async def _in_thread(loop: asyncio.AbstractEventLoop, read: Callable[[], str | None]) -> str:
    """`read()` in a daemon thread: the event loop (background compaction) runs on
    meanwhile, and Ctrl-C does not have to wait for the blocked read to finish, as it
    would with the loop's default executor. End of input is ""."""
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
            line = read()
        except BaseException as exc:  # handed to the awaiting coroutine
            loop.call_soon_threadsafe(deliver, None, exc)
        else:
            loop.call_soon_threadsafe(deliver, line, None)

    threading.Thread(target=work, name="mnemo-stdin", daemon=True).start()
    return await future


async def _read_line(loop: asyncio.AbstractEventLoop, stream: TextIO) -> str:
    return await _in_thread(loop, stream.readline)


async def run_terminal(
    conversations: Conversations,
    base: Session,
    *,
    stdin: TextIO = sys.stdin,
    stdout: TextIO = sys.stdout,
    limit: int = LIMITS.max_message,
    editor: LineEditor | None = None,
    banner: str = "",
) -> int:
    """The conversation; `editor` reads a terminal's lines (prompt, editing, history),
    else lines are read from `stdin` as they come (pipes, scripts)."""
    interactive = stdin.isatty() and stdout.isatty()
    loop = asyncio.get_running_loop()
    if interactive:
        stdout.write(
            f"mnemo chat — session {base.id}. /help for commands, /quit or Ctrl-D to leave.\n"
            + (
                "Alt+Enter (or a line ending in \\) continues your message on a new line.\n"
                if editor is not None
                else ""
            )
            + (banner + "\n" if banner else "")
        )
        stdout.flush()
    await answer_left(conversations, base, stdout, interactive=interactive)
    while True:
        if editor is not None and interactive:
            line = await _in_thread(loop, editor.read)
        else:
            if interactive:
                stdout.write(PROMPT)
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
            answer = await handle_command(
                conversations, base, name, args, is_admin=True, limit=limit
            )
            _show(stdout, answer + "\n\n")
            stdout.flush()
            continue
        session = await conversations.current_session(base)
        printer = _Printer(stdout) if interactive else None
        if printer is not None:
            stdout.write("mnemo> ")
        _print_reply(stdout, await conversations.chat(session, text, on_delta=printer), printer)
    return 0


def _print_reply(out: TextIO, reply: Reply, printer: _Printer | None) -> None:
    """A reply after it streamed through `printer` (on a terminal), or whole (piped)."""
    sources = plain_sources(reply.sources)
    if printer is None:
        _show(out, reply.text + (f"\n{sources}" if sources else "") + "\n\n")
    else:
        if reply.error or reply.text != printer.shown:
            _show(out, ("\n" if printer.shown else "") + reply.text)
        _show(out, (f"\n{sources}" if sources else "") + "\n\n")
    out.flush()


async def answer_left(
    conversations: Conversations, base: Session, out: TextIO, *, interactive: bool
) -> bool:
    """Answer the conversation's last message if it was left unanswered (the chat stopped
    during its answer: Ctrl-C, a kill), saying so first; True if it was. `Conversations.resume`
    answers only a conversation that ends with a user message."""
    printer = _Printer(out) if interactive else None
    said = False

    def say() -> None:
        nonlocal said
        if not said:
            said = True
            out.write(LEFT_UNANSWERED + ("\nmnemo> " if printer is not None else "\n"))

    async def on_delta(text: str) -> None:  # the notice goes before the first words
        say()
        assert printer is not None
        await printer(text)

    reply = await conversations.resume(
        await conversations.current_session(base),
        on_delta=on_delta if printer is not None else None,
    )
    if reply is None:
        return False
    say()
    _print_reply(out, reply, printer)
    return True


class Terminal:
    """The terminal channel: one conversation, `session`, on the root's conversations."""

    name = "terminal"
    limits = LIMITS

    def __init__(
        self,
        conversations: Conversations,
        session: Session,
        *,
        stdin: TextIO = sys.stdin,
        stdout: TextIO = sys.stdout,
        editor: LineEditor | None = None,
        banner: str = "",
    ) -> None:
        self.conversations, self.session, self.stdin, self.stdout = (
            conversations,
            session,
            stdin,
            stdout,
        )
        self.editor, self.banner = editor, banner

    async def run(self, stop: asyncio.Event) -> int:
        await unless_stopped(
            run_terminal(
                self.conversations,
                self.session,
                stdin=self.stdin,
                stdout=self.stdout,
                limit=self.limits.max_message,
                editor=self.editor,
                banner=self.banner,
            ),
            stop,
        )
        return 0


def from_services(services: Any) -> Terminal:
    """The terminal as `channels: [terminal]` runs it: conversation `main` on stdin and
    stdout (`mnemo chat` builds its own, with a line editor and `--session`)."""
    return Terminal(services.conversations, terminal_session(services.settings.agent.id, "main"))
