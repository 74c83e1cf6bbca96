"""`/memory <sub> <words>` for people, read from the action registry: the dispatch, the
usage lines and the command table. Channel-independent: text in, text out.

The prelude every sub-command shares is here, once: the usage check (the command's
`parse`), who may use it, the provider's capability, the session's ids in the context,
writes tagged `user`, the reply cut to the channel's limit. Errors other than a usage
mistake propagate: the caller words them (a NotFound never says whether an id exists
elsewhere)."""

from __future__ import annotations

from typing import Any

from memory.actions.declarations import ACTIONS
from memory.actions.fitting import MAX_REPLY, clip
from memory.actions.spec import Action, Audience, Call, ContextBudget, Registry, perform
from memory.context import with_change_source
from memory.errors import NotFound
from memory.forgetting import shared_scope
from memory.types import ChangeSource, Session


def split_words(text: str) -> tuple[str, str]:
    """`/name@bot args` -> ("name", "args"), for a command and a sub-command alike. The
    name ends at any whitespace, a newline included (`/memory\nstatus` is /memory with
    "status"), and is matched in lower case."""
    head, *rest = text.split(None, 1) or [""]
    name = head.lstrip("/").split("@", 1)[0].lower()
    return name, rest[0].strip() if rest else ""


def usage_lines(registry: Registry = ACTIONS) -> dict[str, str]:
    """Each sub-command's usage line, in the order `/memory help` lists them."""
    out = {}
    for sub, actions in registry.commands().items():
        usage = next((a.command.usage for a in actions if a.command and a.command.usage), "")
        out[sub] = f"/memory {sub} {usage}".rstrip()
    return out


def usage(sub: str | None = None, registry: Registry = ACTIONS) -> str:
    lines = usage_lines(registry)
    if sub is not None:
        return "Usage: " + lines[sub]
    return "Usage:\n" + "\n".join(lines.values())


def table_rows(registry: Registry = ACTIONS) -> list[tuple[str, str]]:
    """(command, what it does) per sub-command, for a command table."""
    rows = []
    for line in usage_lines(registry).values():
        command, _, what = line.partition(" — ")
        rows.append((command, what))
    return rows


async def run_memory_command(
    provider: Any,
    session: Session,
    words: str,
    *,
    is_admin: bool,
    limit: int = MAX_REPLY,
    budget: ContextBudget | None = None,
    registry: Registry = ACTIONS,
) -> str:
    """Answer `/memory <words>` for `session` (the live one); at most `limit` characters."""
    sub, rest = split_words(words)
    if sub in ("", "help"):
        return usage(registry=registry)
    actions = registry.commands().get(sub)
    if actions is None:
        return f"Unknown sub-command {sub!r}.\n{usage(registry=registry)}"
    if not is_admin and any(a.audience == Audience.OPERATOR for a in actions):
        return f"/memory {sub} is for the bot's operators only."
    if (
        not is_admin
        and shared_scope(session.user_id)
        and any(a.audience == Audience.OWNER for a in actions)
    ):
        return (
            f"In a group, /memory {sub} is for the bot's operators only: the group's memory "
            "belongs to every member."
        )
    lacking: Action | None = None
    for action in actions:
        assert action.command is not None
        parsed = action.command.parse(rest)
        if parsed is None:
            continue
        if not action.available(provider):
            lacking = action
            continue
        # People's words were checked by `parse`; the arguments are taken as they are.
        args = action.args.model_construct(**parsed)
        call = Call(provider, session, limit=limit, budget=budget, source=ChangeSource.USER)
        try:
            with with_change_source(ChangeSource.USER):
                text = await perform(action, call, args, action.command.render)
        except NotFound:
            if action.command.not_found:
                return action.command.not_found.format(**parsed)
            raise
        return clip(text, limit)
    if lacking is not None and lacking.command is not None:
        what = lacking.command.lacks or f"/memory {sub}"
        return f"The {provider.name} memory provider does not support {what}."
    return usage(sub, registry)
