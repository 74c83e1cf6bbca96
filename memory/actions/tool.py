"""The `memory` tool: one OpenAI function whose actions follow the provider's capabilities.

The actions, their parameters and their results are declared in memory/actions; this is
the model's front-end over them. `build_tool` writes the schema, `run_tool` executes a
call. Everything the model can get wrong (malformed JSON, an unknown or withheld action,
missing, oversized or out-of-range parameters) comes back as an `error: ...` string it can
read and correct; `run_tool` never raises for the model's input, and a provider bug
becomes a generic error string (logged with its traceback, never shown).

Reads show the live state, not the session's snapshot: the model may write based on
what it reads, and a write based on a stale snapshot would undo a newer change.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError

from memory.actions.arguments import (
    CHANGE_SCOPES,
    SEARCH_SCOPES,
    ArgumentError,
    first_error,
    parameter_schemas,
)
from memory.actions.declarations import ACTIONS
from memory.actions.provenance import returned_refs
from memory.actions.spec import NO_FRONT_END, Call, FrontEnd, perform
from memory.contract.capabilities import Provider
from memory.contract.errors import ContractError, NotFound
from memory.contract.types import ChangeSource, Session

log = logging.getLogger(__name__)

TOOL_NAME = "memory"
MAX_ARGUMENT_CHARS = 64_000
MAX_OUTPUT_CHARS = 24_000

ToolArgumentError = ArgumentError  # the model's arguments are unusable; shown to it

_ACTIONS = ACTIONS  # the registry, by action name
ALL_ACTIONS: tuple[str, ...] = tuple(a.name for a in ACTIONS.tool_actions())

# A rollback rewrites a scope: allowed only where writing that scope is allowed.
_ROLLBACK_NEEDS = {
    "profile": ("profile_update",),
    "soul": ("soul_update",),
    "constraint": ("constraint_add", "constraint_remove"),
}


def _rollback_scopes(actions: Iterable[str]) -> list[str]:
    allowed = set(actions)
    return [scope for scope, needs in _ROLLBACK_NEEDS.items() if allowed.intersection(needs)]


def tool_actions(
    provider: Provider,
    *,
    actions_only: Iterable[str] | None = None,
    read_only_profile: bool = False,
    read_only_soul: bool = False,
) -> list[str]:
    """The actions the `memory` tool offers for `provider`, in a stable order.

    `actions_only` restricts them (names unknown to the tool are a ValueError: a typo
    there must not silently disable an action); the read-only flags withhold the
    profile/soul writes, and rollback of those scopes with them."""
    declared = ACTIONS.tool_actions()
    wanted: set[str] | None = None
    if actions_only is not None:
        wanted = set(actions_only)
        unknown = wanted - {a.name for a in declared}
        if unknown:
            raise ValueError(f"unknown memory tool actions: {', '.join(sorted(unknown))}")
    withheld = {"profile_update"} if read_only_profile else set()
    if read_only_soul:
        withheld.add("soul_update")
    out = [
        a.name
        for a in declared
        if a.available(provider) and (wanted is None or a.name in wanted) and a.name not in withheld
    ]
    if "profile_rollback" in out and not _rollback_scopes(out):
        out.remove("profile_rollback")
    return out


def build_tool(
    provider: Provider,
    *,
    actions_only: Iterable[str] | None = None,
    read_only_profile: bool = False,
    read_only_soul: bool = False,
) -> dict[str, Any]:
    """The OpenAI function-tool schema of the `memory` tool for `provider`.

    Raises ValueError when no action is left (e.g. `actions_only` names only actions the
    provider lacks): a tool without actions is not a valid schema."""
    actions = tool_actions(
        provider,
        actions_only=actions_only,
        read_only_profile=read_only_profile,
        read_only_soul=read_only_soul,
    )
    if not actions:
        raise ValueError("the memory tool would have no actions for this provider")
    properties: dict[str, Any] = {
        "action": {"type": "string", "enum": actions, "description": "what to do"}
    }
    lines = [
        "Your long-term memory of this conversation and this user. Nothing said before is "
        "lost: search and expand recover it. When your answer rests on messages or "
        "summaries it returned, cite their ids in square brackets, e.g. [123]: the user "
        "is shown them as sources. Actions (parameters):"
    ]
    for name in actions:
        action = ACTIONS[name]
        for param, schema in parameter_schemas(action.args).items():
            properties.setdefault(param, schema)
        params = [*action.required, *(f"{p}?" for p in action.params if p not in action.required)]
        if name == "profile_rollback":
            params = [f"scope={'|'.join(_rollback_scopes(actions))}", "version"]
        lines.append(f"- {name}({', '.join(params)}): {action.summary}")
    if "scope" in properties:
        properties["scope"] = {**properties["scope"], "enum": _scope_choices(actions)}
    return {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": "\n".join(lines),
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": ["action"],
                "additionalProperties": False,
            },
        },
    }


def _scope_choices(actions: list[str]) -> list[str]:
    choices: list[str] = []
    if "search" in actions:
        choices.extend(SEARCH_SCOPES)
    if "profile_history" in actions:
        choices.extend(s for s in CHANGE_SCOPES if s not in choices)
    if "profile_rollback" in actions:
        choices.extend(s for s in _rollback_scopes(actions) if s not in choices)
    return choices


# --- argument validation ------------------------------------------------------------


def parse_arguments(arguments: str | dict[str, Any] | None) -> dict[str, Any]:
    """The model's arguments as a dict, or ToolArgumentError saying what is wrong."""
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    if isinstance(arguments, str):
        if len(arguments) > MAX_ARGUMENT_CHARS:
            raise ToolArgumentError(
                f"arguments are too large ({len(arguments)} characters, at most "
                f"{MAX_ARGUMENT_CHARS})"
            )
        try:
            value = json.loads(arguments)
        except (ValueError, RecursionError) as exc:  # ValueError covers huge integers
            raise ToolArgumentError(f"arguments are not valid JSON ({exc})") from None
    else:
        value = arguments
    if not isinstance(value, dict):
        raise ToolArgumentError('arguments must be a JSON object like {"action": "status"}')
    return value


def validate_call(
    args: dict[str, Any], offered: list[str], provider_actions: list[str]
) -> tuple[str, BaseModel]:
    """Check the action and its parameters; returns (action, its validated arguments)."""
    action = args.get("action")
    if not isinstance(action, str) or not action.strip():
        raise ToolArgumentError(f"missing action: one of {', '.join(offered)}")
    action = action.strip()
    declared = ACTIONS.tool_actions()
    if action not in {a.name for a in declared}:
        raise ToolArgumentError(f"unknown action {action[:60]!r}: one of {', '.join(offered)}")
    if action not in offered:
        if action in provider_actions:
            raise ToolArgumentError(f"action {action} is not allowed here")
        raise ToolArgumentError(f"action {action} is not supported by this memory provider")
    known = {p for a in declared for p in a.params}
    unknown = sorted((k for k in args if k != "action" and k not in known), key=str)
    if unknown:
        shown = ", ".join(str(k)[:40] for k in unknown[:5])
        raise ToolArgumentError(f"unknown parameter(s): {shown}")
    spec = ACTIONS[action]
    given = {k: v for k, v in args.items() if k in spec.params and v is not None}
    try:
        cleaned = spec.args.model_validate(given)
    except ValidationError as exc:
        raise first_error(action, exc) from None
    if action == "profile_rollback":
        scopes = _rollback_scopes(offered)
        if cleaned.scope not in scopes:  # type: ignore[attr-defined]
            raise ToolArgumentError(f"profile_rollback scope must be one of {', '.join(scopes)}")
    return action, cleaned


# --- execution ----------------------------------------------------------------------


async def run_tool(
    provider: Provider,
    session: Session,
    arguments: str | dict[str, Any] | None,
    *,
    allowed_actions: set[str] | None = None,
    source: ChangeSource | None = None,
    front: FrontEnd = NO_FRONT_END,
) -> str:
    """Execute one `memory` tool call for `session`; always returns text for the model.
    `front`: what the front-end provides the actions (a model for `recall`). A token
    limit is not checked here: the turn calling the tool was admitted already.

    `allowed_actions` withholds actions (pass the set the schema was built with);
    writes record `source` (who called the tool: the agent in a turn, reflect), or the
    change source the caller set in context when None."""
    provider_actions = tool_actions(provider)
    offered = [a for a in provider_actions if allowed_actions is None or a in allowed_actions]
    try:
        action, args = validate_call(parse_arguments(arguments), offered, provider_actions)
    except ToolArgumentError as exc:
        return f"error: {exc}"
    spec = ACTIONS[action]
    try:
        call = Call(provider, session, tuple(offered), source=source, front=front)
        text = await perform(spec, call, args, spec.render)
    except NotFound as exc:
        return f"not found: {exc}" if str(exc) else "not found"
    except ContractError as exc:
        return f"error: {exc}" if str(exc) else f"error: {type(exc).__name__}"
    except Exception:
        log.exception("memory tool action %s failed", action)
        return f"error: the memory provider failed on {action}; try again later"
    if len(text) > MAX_OUTPUT_CHARS:
        text = text[:MAX_OUTPUT_CHARS] + "\n[output cut: narrow the request]"
    if front.in_turn:  # (one FrontEnd per turn: NO_FRONT_END is never in a turn)
        front.citable.update(r.id for r in returned_refs(action, text) if r.kind == "message")
    return text
