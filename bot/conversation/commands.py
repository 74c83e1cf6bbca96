"""Slash commands, channel-independent: text in, text out, so Telegram and the terminal
share them. Every answer fits one Telegram message (long listings are cut with a note).
`/memory <sub>` is answered from the memory action registry (memory/actions); this module
keeps the commands of the chat itself and the wording of failures.

Decisions:
- `session` may be a channel's base session or its live one: the live session is always
  resolved through `conversations.current_session`, so `/new` rotation works the same everywhere.
- Writes from commands are tagged with change source `user` and advance the session's
  snapshot, so the next turn's system prompt shows them (a rule a person sets applies at
  once, at the cost of one uncached request; the model's own writes wait for the next
  compaction, memory/actions/spec.py `perform`).
- `rollback` is operator-only (`is_admin`): it rewrites a whole memory scope, and in a group
  that scope belongs to every member. Everything else acts on the caller's own memory.
- Provider errors become one plain line; `NotFound` never says whether the id exists
  elsewhere (a summary id alone must not reveal another user's memory).
"""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError

from bot.conversation.service import Conversations
from bot.model.client import LLMError
from memory.actions.commands import run_memory_command, split_words, table_rows
from memory.actions.delegated_recall import RecallModelFailed
from memory.actions.fitting import MAX_REPLY, clip
from memory.actions.spec import ContextBudget, ContextFigures, FrontEnd
from memory.compaction.summarizer import SummarizerError
from memory.contract.capabilities import Compactor
from memory.contract.errors import (
    CompactionIncomplete,
    ContractError,
    InvalidArgument,
    NotFound,
    Unsupported,
)
from memory.contract.types import CompactionResult, Session

log = logging.getLogger(__name__)

__all__ = [
    "COMMANDS",
    "HELP",
    "MAX_REPLY",
    "clip",
    "command_parts",
    "command_table",
    "failure_reason",
    "handle_command",
]

# Every command and what it does, once: /help lists them (all but /start, whose answer
# is an introduction followed by that list), and a channel with a command menu shows
# them there (Telegram's setMyCommands).
COMMANDS: tuple[tuple[str, str], ...] = (
    ("start", "introduction"),
    ("help", "list the commands"),
    ("new", "start a new conversation (the old one is archived; your memory stays)"),
    ("compact", "compact this conversation's history now"),
    ("memory", "what I remember; /memory help lists its sub-commands"),
)
HELP = "Commands:\n" + "\n".join(f"/{name} — {what}" for name, what in COMMANDS if name != "start")

command_parts = split_words  # `/name@bot args` -> ("name", "args")


async def handle_command(
    conversations: Conversations,
    session: Session,
    name: str,
    args: str,
    *,
    is_admin: bool,
    limit: int = MAX_REPLY,
    member: int | None = None,
    group_admin: bool = False,
) -> str:
    """Answer `/name args`, in at most `limit` characters (the channel's). Never raises
    for user or provider errors. In a group: `member`, who asked (their own words are
    theirs to forget or keep out, memory/consent/); `group_admin`, whether the channel
    found them an admin of the group (its group-wide memory commands are theirs)."""
    asker = Asker(is_admin, member, group_admin)
    return clip(await _answer(conversations, session, name, args, asker), limit)


@dataclass(frozen=True)
class Asker:
    """Who asked, as the channel knows them."""

    is_admin: bool  # one of the bot's operators (`telegram.admin_ids`)
    member: int | None = None  # their user id, in a memory several people share
    group_admin: bool = False  # an admin of the group whose memory it is


async def _answer(
    conversations: Conversations, session: Session, name: str, args: str, asker: Asker
) -> str:
    command = name.strip().lstrip("/").split("@", 1)[0].lower()
    base = session.base()
    try:
        if command in ("start", "help"):
            return _start(conversations) if command == "start" else HELP
        if command in ("new", "compact") and args.strip():
            # `/new please` or `/compact now` must not act on words it does not read.
            return f"/{command} takes no arguments. Usage: /{command} — {dict(COMMANDS)[command]}"
        if command == "new":
            await conversations.new_session(base)
            return (
                "Started a new conversation; the previous one is archived. "
                "Your profile, rules and notes stay with you."
            )
        # Resolving the live session reads the database: inside the try, like the rest.
        if command == "compact":
            return await _compact(conversations, await conversations.current_session(base))
        if command == "memory":
            return await _memory(
                conversations, await conversations.current_session(base), args, asker
            )
        return f"Unknown command /{command}.\n\n{HELP}"
    except NotFound:
        return "Not found."
    except (InvalidArgument, Unsupported) as exc:
        return str(exc) or "That request is not valid."
    except RecallModelFailed as exc:
        return f"{exc}; nothing was changed."
    except ContractError as exc:
        return f"The memory store refused: {exc}"
    except Exception as exc:
        # The user gets a plain sentence; the exception and its traceback go to the log.
        log.exception("command /%s failed", command)
        return f"Sorry, /{command} failed: {failure_reason(exc)}; nothing was changed."


def failure_reason(exc: BaseException) -> str:
    """Why a command failed, in words a user understands (never an exception's name):
    the first cause along `__cause__`/`__context__` that can be named."""
    fallback = "something went wrong on my side"
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, LLMError):
            return cause.reason  # "the language model could not be reached", ...
        if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
            return "the disk is full"
        if isinstance(cause, SQLAlchemyError):
            return "my memory store could not be reached"
        if isinstance(cause, SummarizerError):  # a deeper cause may say more
            fallback = "the language model gave no usable summary"
        cause = cause.__cause__ or cause.__context__
    return fallback


def _start(conversations: Conversations) -> str:
    return (
        "Hi! I'm mnemo: I remember our conversations, however long they get. "
        "Just write to me.\n\n" + HELP
    )


async def _compact(conversations: Conversations, session: Session) -> str:
    if not isinstance(conversations.provider, Compactor):
        return f"The {conversations.provider.name} memory provider does not compact conversations."
    try:
        result = await conversations.compact(session)
    except CompactionIncomplete as exc:
        # Not "nothing was changed": the rounds done are kept, and the user should know
        # that trying again continues. The cause goes to the log, like any failure.
        log.warning("/compact of %s stopped part way", session.id, exc_info=exc)
        return clip(
            "Compaction stopped part way: what it had done is kept, the rest "
            f"failed ({failure_reason(exc.__cause__ or exc)}). "
            + _compacted(exc.result)
            + " Send /compact again to finish."
        )
    if not result.changed:
        return _nothing_to_compact(conversations, result.tokens_before)
    text = _compacted(result)
    if result.summary.strip():
        text += "\n\nSummary:\n" + result.summary.strip()
    return clip(text)


def _nothing_to_compact(conversations: Conversations, tokens: int) -> str:
    """Why a compaction changed nothing, in the terms `/memory status` uses: the context
    may well be above the auto-compaction threshold, yet be all in the newest messages,
    which compaction keeps as they are."""
    keep = conversations.settings.compaction.keep_tail
    above = conversations.settings.compaction.max_tokens
    text = (
        f"Nothing to compact yet: the context is {tokens} tokens, but none of it is in "
        f"messages old enough to summarise (the newest {keep} messages are always kept as "
        "they are, and a summary needs several older ones)."
    )
    if above != -1 and tokens > above:
        text += f" Automatic compaction (above {above} tokens) runs once there are some."
    return text


def _compacted(result: CompactionResult) -> str:
    summaries = result.leaf_summaries_created + result.condensed_summaries_created
    return (
        f"Compacted {result.messages_compacted} messages into {summaries} "
        f"summar{'y' if summaries == 1 else 'ies'} "
        f"({result.leaf_summaries_created} leaf, {result.condensed_summaries_created} "
        f"condensed). Context: {result.tokens_before} → {result.tokens_after} tokens."
    )


async def _memory(conversations: Conversations, session: Session, args: str, asker: Asker) -> str:
    compact_above = conversations.settings.compaction.max_tokens
    budget = ContextBudget(
        conversations.settings.memory.budget_tokens, None if compact_above == -1 else compact_above
    )

    # What the actions may ask of the bot: the model (recall), the user's token limits
    # (refusing an action that needs the model; /memory status shows the usage).
    async def context() -> ContextFigures:
        from bot.conversation.context_figures import next_context

        measured = await next_context(conversations.provider, conversations.settings, session)
        return measured.figures

    front = FrontEnd(
        budget=budget,
        recaller=conversations.recaller,
        limits=conversations.budgets,
        context=context,
        member=asker.member,
    )
    return await run_memory_command(
        conversations.provider,
        session,
        args,
        is_admin=asker.is_admin,
        group_admin=asker.group_admin,
        front=front,
    )


def command_table() -> str:
    """The chat's commands as a Markdown table (docs/CHAT.md's), /memory's from the registry."""
    rows = [(f"/{name}", what) for name, what in COMMANDS if name != "memory"]
    rows += table_rows()
    lines = ["| command | what it does |", "| --- | --- |"]
    lines += [f"| `{command.replace('|', chr(92) + '|')}` | {what} |" for command, what in rows]
    return "\n".join(lines)
