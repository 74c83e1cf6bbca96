"""`/memory <sub> <words>` for people, read from the action registry: the dispatch, the
usage lines and the command table. Channel-independent: text in, text out.

The prelude every sub-command shares is here, once: the usage check (the command's
`parse`), who may use it, the provider's capability, the session's ids in the context,
writes tagged `user`, the reply cut to the channel's limit. Errors other than a usage
mistake propagate: the caller words them (a NotFound never says whether an id exists
elsewhere)."""

from __future__ import annotations

from memory.actions.declarations import ACTIONS
from memory.actions.fitting import MAX_REPLY, clip, one_line
from memory.actions.spec import NO_FRONT_END, Action, Audience, Call, FrontEnd, Registry, perform
from memory.contract.capabilities import Provider
from memory.contract.context import with_change_source
from memory.contract.errors import NotFound
from memory.contract.types import ChangeSource, Session
from memory.storage.forgetting import shared_scope
from memory.text.sanitize import storable


def split_words(text: str) -> tuple[str, str]:
    """`/name@bot args` -> ("name", "args"), for a command and a sub-command alike. The
    name ends at any whitespace, a newline included (`/memory\nstatus` is /memory with
    "status"), and is matched in lower case."""
    head, *rest = text.split(None, 1) or [""]
    name = head.lstrip("/").split("@", 1)[0].lower()
    return name, rest[0].strip() if rest else ""


def usage_lines(registry: Registry = ACTIONS, provider: Provider | None = None) -> dict[str, str]:
    """Each sub-command's usage line, in the order `/memory help` lists them; with a
    `provider`, only the sub-commands it supports (simple has notes, lcm has expand)."""
    out = {}
    for sub, actions in registry.commands().items():
        if provider is not None and not any(a.available(provider) for a in actions):
            continue
        usage = next((a.command.usage for a in actions if a.command and a.command.usage), "")
        out[sub] = f"/memory {sub} {usage}".rstrip()
    return out


def usage(
    sub: str | None = None, registry: Registry = ACTIONS, provider: Provider | None = None
) -> str:
    if sub is not None:
        return "Usage: " + usage_lines(registry)[sub]
    return "Usage:\n" + "\n".join(usage_lines(registry, provider).values())


def available_subs(provider: Provider, registry: Registry = ACTIONS) -> list[str]:
    """The `/memory` sub-commands `provider` supports, in listing order."""
    return list(usage_lines(registry, provider))


def table_rows(registry: Registry = ACTIONS) -> list[tuple[str, str]]:
    """(command, what it does) per sub-command, for a command table."""
    rows = []
    for line in usage_lines(registry).values():
        command, _, what = line.partition(" — ")
        rows.append((command, what))
    return rows


def open_subs(provider: Provider, registry: Registry = ACTIONS) -> tuple[str, ...]:
    """The sub-commands `provider` supports that are not for operators only (`/memory
    status` lists them; `/memory help` lists and marks the operators' ones too)."""
    by_sub = registry.commands()
    return tuple(
        sub
        for sub in available_subs(provider, registry)
        if not all(a.audience == Audience.OPERATOR for a in by_sub[sub])
    )


def group_wide(words: str, registry: Registry = ACTIONS) -> bool:
    """Whether `/memory <words>` may be a group-wide sub-command (`Audience.OWNER`): the
    only ones for which a channel needs to know if the caller administers the group."""
    sub, _ = split_words(words)
    return any(a.audience == Audience.OWNER for a in registry.commands().get(sub, []))


async def run_memory_command(
    provider: Provider,
    session: Session,
    words: str,
    *,
    is_admin: bool,
    group_admin: bool = False,
    limit: int = MAX_REPLY,
    front: FrontEnd = NO_FRONT_END,
    registry: Registry = ACTIONS,
) -> str:
    """Answer `/memory <words>` for `session` (the live one); at most `limit` characters.
    `front`: what the front-end provides the actions (a model for `/memory ask`, the
    user's token limits, the context budget /memory status shows). `group_admin`: the
    caller administers the group whose memory this is (the channel asked it): the
    group-wide sub-commands (`Audience.OWNER`) are theirs there, the operators' ones
    (`Audience.OPERATOR`) are not."""
    sub, rest = split_words(words)
    if sub in ("", "help"):
        return usage(registry=registry, provider=provider)
    actions = registry.commands().get(sub)
    if actions is None:
        return f"Unknown sub-command {sub!r}.\n{usage(registry=registry, provider=provider)}"
    if (
        any(a.needs_model for a in actions)
        and front.limits is not None
        and await front.limits.refusal(session.user_id) is not None
    ):
        return (
            f"Sorry, you have used up your tokens for now, and /memory {sub} needs the "
            "model (/memory status shows your usage). /memory search still works."
        )
    if not is_admin and any(a.audience == Audience.OPERATOR for a in actions):
        return f"/memory {sub} is for the bot's operators only."
    lacking: Action | None = None
    for action in actions:
        assert action.command is not None
        parsed = action.command.parse(rest)
        if parsed is None:
            continue
        # Per action: `/memory forget mine` is a member's own, `/memory forget <text>`
        # the group's.
        if (
            not (is_admin or group_admin)
            and shared_scope(session.user_id)
            and action.audience == Audience.OWNER
        ):
            return (
                f"In a group, /memory {sub} is for the group's admins and the bot's "
                "operators only: the group's memory belongs to every member."
            )
        if not action.available(provider):
            lacking = action
            continue
        # People's words were checked by `parse`; the arguments are taken as they are.
        args = action.args.model_construct(**parsed)
        call = Call(
            provider,
            session,
            open_subs(provider, registry),
            limit=limit,
            source=ChangeSource.USER,
            front=front,
        )
        try:
            with with_change_source(ChangeSource.USER):
                text = await perform(action, call, args, action.command.render)
        except NotFound:
            if action.command.not_found:  # the words echoed on one line, storable
                shown = {
                    k: one_line(storable(v), 100) if isinstance(v, str) else v
                    for k, v in parsed.items()
                }
                return action.command.not_found.format(**shown)
            raise
        return clip(text, limit)
    if lacking is not None and lacking.command is not None:
        what = lacking.command.lacks or f"/memory {sub}"
        return f"The {provider.name} memory provider does not support {what}."
    return usage(sub, registry)
