"""A new memory action is one declaration: declared here, in the test, through the public
registry (and withdrawn after), it is in the model's tool, in `/memory` (dispatch, help,
the command table, status's list) and its handler runs; what it needs of the front-end
(the model, the user's token limits) is declared on it, not coded in the front-end.

Files a new action touches: its declaration and handler (memory/actions/declarations.py,
or a module of its own plus the one `ACTIONS.declare(...)` line that imports it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memory.actions import ACTIONS, Action, Arguments, Call, Command
from memory.actions.arguments import Text
from memory.actions.commands import run_memory_command, table_rows
from memory.actions.spec import FrontEnd
from memory.actions.tool import build_tool, run_tool
from memory.contract.types import Message, Session, SessionStats

ANA = Session("s-ana", "bot", 1, "telegram")


class Core:
    """The provider core only: the demo actions need no capability."""

    name = "core"

    async def bootstrap(self, session: Session) -> None: ...

    async def append(self, session: Session, *msgs: Message) -> None: ...

    async def assemble(self, session: Session, budget: int, fresh_tail: int) -> list[Message]:
        return []

    async def stats(self, session: Session) -> SessionStats:
        return SessionStats(message_count=12, token_count=340, context_tokens=120)

    async def close(self) -> None: ...


# --- the declarations: all a new action is -------------------------------------------


class WordsArgs(Arguments):
    text: Text


async def _words(call: Call, args: WordsArgs) -> int:
    stats = await call.provider.stats(call.session)
    return len(args.text.split()) + stats.message_count


async def _words_text(call: Call, args: WordsArgs, n: int) -> str:
    return f"{n} words, counting this conversation's messages as one each."


WORDS = Action(
    "words",
    WordsArgs,
    None,  # any provider: the core contract is enough
    "count the words of a text and this conversation's messages",
    _words,
    command=Command(
        "words",
        "<text> — count its words and our messages",
        parse=lambda words: {"text": words} if words else None,
        render=_words_text,
    ),
)


class NoArgs(Arguments):
    pass


async def _muse(call: Call, args: NoArgs) -> str:
    return "a thought from the model"


MUSE = Action(
    "muse",
    NoArgs,
    None,
    "think aloud with the model",
    _muse,
    tool=False,  # people's only
    needs_model=True,  # the front-end refuses it to a user over a token limit
    command=Command("muse", "— think aloud with the model"),
)


@pytest.fixture
def declared() -> Iterator[None]:
    ACTIONS.declare(WORDS)  # what a new action's module does, once
    ACTIONS.declare(MUSE)
    yield
    ACTIONS.withdraw("muse")
    ACTIONS.withdraw("words")


# --- what follows from them ----------------------------------------------------------


class Limits:
    """A front-end's token limits (the bot's are bot/conversation/budgets.py)."""

    def __init__(self, over: bool) -> None:
        self.over = over

    async def refusal(self, user_id: int) -> str | None:
        return "over the limit" if self.over else None

    async def status_lines(self, user_id: int) -> list[str]:
        return [f"Usage: user {user_id} used 42 tokens today"]


async def test_the_tool_offers_and_runs_it(declared: None) -> None:
    function = build_tool(Core())["function"]
    assert "words" in function["parameters"]["properties"]["action"]["enum"]
    assert "muse" not in function["parameters"]["properties"]["action"]["enum"]
    assert "- words(text): count the words of a text" in function["description"]
    said = await run_tool(Core(), ANA, {"action": "words", "text": "one two three"})
    assert said == "15"
    assert await run_tool(Core(), ANA, {"action": "words"}) == "error: words needs text"


async def test_memory_dispatches_it_and_lists_it(declared: None) -> None:
    answer = await run_memory_command(Core(), ANA, "words one two three", is_admin=False)
    assert answer == "15 words, counting this conversation's messages as one each."
    assert await run_memory_command(Core(), ANA, "words", is_admin=False) == (
        "Usage: /memory words <text> — count its words and our messages"
    )
    help_text = await run_memory_command(Core(), ANA, "help", is_admin=False)
    assert "/memory words <text> — count its words and our messages" in help_text
    assert "/memory muse — think aloud with the model" in help_text
    assert ("/memory words <text>", "count its words and our messages") in table_rows()
    status = await run_memory_command(Core(), ANA, "status", is_admin=False)
    assert "/memory words" in status.splitlines()[-1]


async def test_what_it_needs_of_the_front_end_is_declared(declared: None) -> None:
    over = FrontEnd(limits=Limits(over=True))
    assert await run_memory_command(Core(), ANA, "muse", is_admin=False, front=over) == (
        "Sorry, you have used up your tokens for now, and /memory muse needs the model "
        "(/memory status shows your usage). /memory search still works."
    )
    # An action that does not need the model runs for the same user.
    words = await run_memory_command(Core(), ANA, "words a", is_admin=False, front=over)
    assert words.startswith("13 words")
    under = FrontEnd(limits=Limits(over=False))
    answer = await run_memory_command(Core(), ANA, "muse", is_admin=False, front=under)
    assert answer == "a thought from the model"
    # No limits (a front-end without budgets): nothing to refuse.
    assert await run_memory_command(Core(), ANA, "muse", is_admin=False) == (
        "a thought from the model"
    )
    # The status shows the front-end's usage lines after the memory's.
    status = await run_memory_command(Core(), ANA, "status", is_admin=False, front=over)
    assert status.endswith("\n\nUsage: user 1 used 42 tokens today")


def test_withdrawn_it_is_gone() -> None:
    assert "words" not in ACTIONS and "muse" not in ACTIONS
