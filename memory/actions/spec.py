"""What a memory action is, and the registry that holds every one of them.

An action is declared once (`Action`): its name, its arguments as a pydantic model, the
capability the provider needs, who may use it, its handler and its two renderings: the
text the model reads (memory tool) and, when people may ask for it, a `/memory`
sub-command (`Command`: usage line, how its words become arguments, the reply). The
memory tool's schema, the `/memory` dispatch, its usage lines and docs/CHAT.md's command
table are all read from the registry, so a new action is one declaration and its handler.

What an action needs of the front-end running it (a model for recall, the user's token
limits and usage) comes through one `FrontEnd`, declared here and filled by the front-end,
so memory never imports the bot and a new need is one field there, not a `Call` field.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from memory.contract.capabilities import Provider, SessionSnapshotStore
from memory.contract.context import (
    change_source_from_context,
    with_agent_id,
    with_session_id,
    with_user_id,
)
from memory.contract.errors import Unsupported
from memory.contract.options import WriteOptions
from memory.contract.tracing import capability, unwrap
from memory.contract.types import ChangeSource, Session
from memory.storage import snapshots

log = logging.getLogger(__name__)

T = TypeVar("T")


class Audience(enum.StrEnum):
    """Who may ask for an action as a `/memory` sub-command."""

    USER = "user"  # on the caller's own memory
    OPERATOR = "operator"  # the bot's operators only (rewrites a scope a group shares)
    # the caller's own memory; a memory a group shares (memory.storage.forgetting.shared_scope):
    # the group's admins and the bot's operators only, since it belongs to every member
    OWNER = "owner"


@dataclass(frozen=True)
class ContextBudget:
    """The context limits a person is shown with the status: the budget and the size
    above which compaction runs (None: automatic compaction is off)."""

    tokens: int
    compact_above: int | None


@dataclass(frozen=True)
class ContextFigures:
    """The next turn's context as the front-end would send it, in its estimated tokens:
    the one set of numbers `/memory status` and the web console show. `stored` is the
    conversation's own measure (summaries and messages in its context), which automatic
    compaction compares with `compact_above`."""

    system: int  # the system prompt (profile, soul, rules at the session's snapshot)
    tools: int  # the memory tool's schema
    summaries: int  # summaries in the assembled history
    messages: int  # messages in the assembled history
    budget: int  # memory.budget_tokens: all of the above must fit in it
    compact_above: int | None  # compaction.max_tokens; None: automatic compaction off
    stored: int
    # The model's context window in tokens (`llm.context_window`, or what the model server
    # reported at start); None: not known (hosted APIs do not say).
    window: int | None = None

    @property
    def total(self) -> int:
        return self.system + self.tools + self.summaries + self.messages


class Recalled(Protocol):
    """What a recall answers (memory.actions.delegated_recall.Answer)."""

    def render(self) -> str: ...


class Recaller(Protocol):
    """The delegated recall sub-call (memory.actions.delegated_recall.Recaller): a
    question about `session`'s past answered by a model, citing what it read."""

    async def __call__(
        self, provider: Provider, session: Session, question: str, *, in_turn: bool = False
    ) -> Recalled: ...


class UserLimits(Protocol):
    """A user's token limits and usage, as the bot keeps them (bot/conversation/budgets.py)."""

    async def refusal(self, user_id: int) -> str | None:
        """Why `user_id` may not use the model now (over a limit), else None."""
        ...

    async def status_lines(self, user_id: int) -> list[str]:
        """What the user's model calls cost, for /memory status."""
        ...


@dataclass(frozen=True)
class FrontEnd:
    """What the front-end running an action provides besides the provider; None where it
    has none (a test, reflect). A feature that needs something new of the front-end adds
    it here, and the front-ends that have it fill it in."""

    budget: ContextBudget | None = None  # the context limits people are shown
    # The next turn's context, measured as the front-end sends it (`/memory status`).
    context: Callable[[], Awaitable[ContextFigures]] | None = None
    recaller: Recaller | None = None  # a model for `recall` (`Action.needs_model`)
    limits: UserLimits | None = None  # the user's token limits and usage
    # The action runs while a turn is answered (the model's tool in a turn): searches
    # leave that turn out (`SearchQuery.in_turn`).
    in_turn: bool = False
    # Who asked, where the memory is shared (a group member's user id): whose words
    # `/memory forget mine` and `/memory optout` act on (memory/consent/).
    member: int | None = None
    # Message ids a fact written now may cite besides the turn's own conversation
    # (memory/facts/citing.py): in a turn, what its memory calls returned so far (the
    # tool adds them, one FrontEnd per turn); for reflect, the material it reviewed.
    citable: set[str] = field(default_factory=set)


NO_FRONT_END = FrontEnd()


@dataclass(frozen=True)
class Call:
    """One action being run: the provider, the session it acts for, what the front-end
    offers for this provider (the tool's actions; `/memory`'s sub-commands open to
    everyone), the reply limit people are shown, who writes, and the front-end's services."""

    provider: Provider
    session: Session
    offered: tuple[str, ...] = ()
    limit: int = 0
    # Who writes (the model: agent; /memory: user; reflect); None: the caller's context.
    source: ChangeSource | None = None
    front: FrontEnd = field(default=NO_FRONT_END)

    @property
    def owner(self) -> tuple[int, str]:
        return self.session.user_id, self.session.agent_id

    def provider_as(self, cap: Callable[..., T]) -> T:
        """The provider as `cap`, which the action's dispatch has checked it implements
        (Unsupported if a handler reaches past its declared capability)."""
        narrowed = capability(self.provider, cap)
        if narrowed is None:
            what = getattr(cap, "__name__", str(cap))
            raise Unsupported(f"the {self.provider.name} memory provider is no {what}")
        return narrowed

    def write_options(self) -> WriteOptions:
        """What a store write of this call records in the changelog."""
        if self.source is None:
            return WriteOptions.from_context()
        return WriteOptions(self.source, self.session.id)


Handler = Callable[[Call, Any], Awaitable[Any]]
# A rendering: (call, arguments, the handler's result) -> text.
Render = Callable[[Call, Any, Any], Awaitable[str]]


async def as_text(call: Call, args: Any, result: Any) -> str:
    """The default rendering: the handler's result as it is."""
    return str(result)


@dataclass(frozen=True)
class Command:
    """How people ask for an action: `/memory <sub> <words>`.

    Several actions may share a sub-command (`notes` lists, `notes <name>` shows one): the
    first whose `parse` accepts the words and whose capability the provider has runs."""

    sub: str
    usage: str = ""  # "<text> — what it does"; one action of a sub-command carries it
    parse: Callable[[str], dict[str, Any] | None] = lambda words: None if words else {}
    render: Render = as_text
    lacks: str = ""  # "The <provider> memory provider does not support <lacks>."
    not_found: str = ""  # the reply when the provider says NotFound, formatted with args
    listed_after: str = ""  # its place in the usage listing, when not declaration order


@dataclass(frozen=True)
class Action:
    name: str
    args: type[BaseModel]
    capability: type | None
    summary: str  # the model's one line
    handler: Handler
    render: Render = as_text  # the model's text
    audience: Audience = Audience.USER
    command: Command | None = None
    tool: bool = True  # offered to the model
    write: str = ""  # "" reads; else the scope written (a person's write moves the snapshot)
    # Calls the model: `/memory` refuses it to a user over a token limit, as a turn is.
    needs_model: bool = False

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(n for n, f in self.args.model_fields.items() if f.is_required())

    @property
    def params(self) -> tuple[str, ...]:
        """Its parameters: the required ones first, as declared."""
        return tuple(self.args.model_fields)

    def available(self, provider: Provider) -> bool:
        return self.capability is None or isinstance(unwrap(provider), self.capability)


class Registry(Mapping[str, Action]):
    """Actions by name, in declaration order (the order the model and people see)."""

    def __init__(self) -> None:
        self._actions: dict[str, Action] = {}

    def declare(self, action: Action) -> Action:
        if action.name in self._actions:
            raise ValueError(f"memory action {action.name!r} is declared twice")
        self._actions[action.name] = action
        return action

    def withdraw(self, name: str) -> None:
        del self._actions[name]

    def __getitem__(self, name: str) -> Action:
        return self._actions[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._actions)

    def __len__(self) -> int:
        return len(self._actions)

    def tool_actions(self) -> list[Action]:
        return [a for a in self._actions.values() if a.tool]

    def commands(self) -> dict[str, list[Action]]:
        """Sub-command -> its actions, in the order the usage listing shows them."""
        subs: dict[str, list[Action]] = {}
        for action in self._actions.values():
            if action.command is not None:
                subs.setdefault(action.command.sub, []).append(action)
        order = list(subs)
        for sub, actions in subs.items():
            after = next(
                (a.command.listed_after for a in actions if a.command and a.command.listed_after),
                "",
            )
            if after in order:
                order.remove(sub)
                order.insert(order.index(after) + 1, sub)
        return {sub: subs[sub] for sub in order}


async def perform(action: Action, call: Call, args: BaseModel, render: Render) -> str:
    """Run `action`'s handler and `render` its result, with the session's ids in the
    context (stores tag their writes with them).

    A person's write (`/memory constrain`, rollback) reaches the session's system prompt
    from its next turn: the snapshot moves now. The model's own write (the memory tool)
    and reflect's do not move it: the model has the write in the conversation already
    (its call and the tool result), and rewriting the system prompt would make the
    model server bill the whole history again; they reach the prompt at the session's
    next compaction, which rebuilds the prefix anyway (`SharedStores.record_compaction`)."""
    session = call.session
    with (
        with_session_id(session.id),
        with_user_id(session.user_id),
        with_agent_id(session.agent_id),
    ):
        result = await action.handler(call, args)
        source = call.source or change_source_from_context()
        if action.write and source == ChangeSource.USER:
            await advance_snapshot(call.provider, session)
        return await render(call, args, result)


async def advance_snapshot(provider: Provider, session: Session) -> None:
    """After a person's memory write, the session sees it (its snapshot moves)."""
    store = capability(provider, SessionSnapshotStore)
    if store is None:
        return
    try:
        await store.advance_snapshot(session.id, session.user_id, session.agent_id)
    except Exception:
        # The write itself succeeded; the session sees it from its next snapshot.
        log.warning("advancing the snapshot of session %s failed", session.id, exc_info=True)
    finally:
        snapshots.moved()
