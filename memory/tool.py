"""The `memory` tool: one OpenAI function whose actions follow the provider's capabilities.

`build_tool` writes the schema, `run_tool` executes a call. Everything the model can get
wrong (malformed JSON, an unknown or withheld action, missing, oversized or out-of-range
parameters) comes back as an `error: ...` string it can read and correct; `run_tool`
never raises for the model's input, and a provider bug becomes a generic error string
(logged with its traceback, never shown).

Reads show the live state, not the session's snapshot: the model may write based on
what it reads, and a write based on a stale snapshot would undo a newer change.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

from memory import snapshots
from memory.capabilities import (
    ChangelogReader,
    ConstraintStore,
    Explorer,
    NoteStore,
    ProfileStore,
    Provider,
    Searcher,
    SessionSnapshotStore,
    VersionedProfileStore,
    capabilities_of,
)
from memory.context import with_agent_id, with_session_id, with_user_id
from memory.errors import MemoryError_, NotFound
from memory.tracing import unwrap
from memory.types import (
    ChangeEntry,
    ConstraintEntry,
    DescribeResult,
    ExpandResult,
    NoteEntry,
    SearchMode,
    SearchQuery,
    SearchScope,
    Session,
    minute_utc,
)

log = logging.getLogger(__name__)

TOOL_NAME = "memory"
MAX_ARGUMENT_CHARS = 64_000
MAX_OUTPUT_CHARS = 24_000
PREVIEW_CHARS = 200
DEFAULT_SEARCH_LIMIT = 10
DEFAULT_TOKEN_CAP = 4000
DEFAULT_HISTORY_LIMIT = 10


class ToolArgumentError(ValueError):
    """The model's arguments are unusable; the message is shown to the model."""


# --- parameters ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Param:
    schema: dict[str, Any]
    max_chars: int = 0  # strings
    min_value: int = 0  # integers
    max_value: int = 0
    choices: tuple[str, ...] = ()

    @property
    def is_int(self) -> bool:
        return bool(self.schema["type"] == "integer")


_SEARCH_SCOPES = tuple(s.value for s in SearchScope)
_CHANGE_SCOPES = ("profile", "soul", "constraint", "compaction")

_PARAMS: dict[str, _Param] = {
    "text": _Param({"type": "string", "description":
                    "search: what to look for; constraint_add: the rule; note_search: query"},
                   max_chars=2000),
    "scope": _Param({"type": "string", "enum": [*_SEARCH_SCOPES, *_CHANGE_SCOPES],
                     "description": "search: messages|summaries|both (default both); "
                                    "profile_history: profile|soul|constraint|compaction "
                                    "(default all); profile_rollback: what to roll back"},
                    choices=(*_SEARCH_SCOPES, *_CHANGE_SCOPES)),
    "mode": _Param({"type": "string", "enum": [m.value for m in SearchMode],
                    "description": "search: hybrid (default: ranked by words and, when "
                                   "embeddings are on, meaning), full_text (ranked words) "
                                   "or substring (the exact text, newest first)"},
                   choices=tuple(m.value for m in SearchMode)),
    "limit": _Param({"type": "integer", "minimum": 1, "maximum": 50,
                     "description": "maximum number of results"},
                    min_value=1, max_value=50),
    "summary_id": _Param({"type": "string", "description": "id of a summary, e.g. from search"},
                         max_chars=128),
    "token_cap": _Param({"type": "integer", "minimum": 100, "maximum": 32000,
                         "description": f"expand: token budget (default {DEFAULT_TOKEN_CAP})"},
                        min_value=100, max_value=32000),
    "content": _Param({"type": "string", "description":
                       "the full new text (profile, soul or note); replaces the old one"},
                      max_chars=20_000),
    "id": _Param({"type": "string", "description": "constraint_remove: the constraint's id"},
                 max_chars=64),
    "version": _Param({"type": "integer", "minimum": 1,
                       "description": "profile_rollback: the version to restore"},
                      min_value=1, max_value=2**53),
    "name": _Param({"type": "string", "description": "note name (or alias)"}, max_chars=200),
    "new_name": _Param({"type": "string", "description": "note_rename: the new name"},
                       max_chars=200),
    "alias": _Param({"type": "string", "description": "note_alias: another name for the note"},
                    max_chars=200),
}


# --- actions ------------------------------------------------------------------------


Handler = Callable[["_Call"], Awaitable[str]]


@dataclass(frozen=True)
class _Action:
    capability: type | None
    summary: str
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    write: str = ""  # "" read; else the scope written (advances the snapshot)
    allow_empty: tuple[str, ...] = ()  # required strings that may be ""

    @property
    def params(self) -> tuple[str, ...]:
        return self.required + self.optional


_ACTIONS: dict[str, _Action] = {
    "status": _Action(None, "memory statistics of this conversation"),
    "search": _Action(Searcher, "search earlier messages and summaries; ask in plain "
                      "words (a question or a few keywords: any of them may match, rarer "
                      "ones weigh more); each hit has its id, date and a snippet",
                      ("text",), ("scope", "mode", "limit")),
    "describe": _Action(Explorer, "show a summary with its parents and children",
                        ("summary_id",)),
    "expand": _Action(Explorer, "recover what a summary was built from",
                      ("summary_id",), ("token_cap",)),
    "profile_get": _Action(ProfileStore, "read what you know about the user"),
    "profile_update": _Action(ProfileStore, "replace the user profile", ("content",),
                              write="profile", allow_empty=("content",)),
    "soul_get": _Action(ProfileStore, "read your own persona notes (soul)"),
    "soul_update": _Action(ProfileStore, "replace your soul", ("content",),
                           write="soul", allow_empty=("content",)),
    "profile_history": _Action(ChangelogReader, "recent changes to profile, soul, constraints",
                               (), ("scope", "limit")),
    "profile_rollback": _Action(VersionedProfileStore, "restore a scope as it was at a version",
                                ("scope", "version"), write="rollback"),
    "constraint_list": _Action(ConstraintStore, "list the user's standing rules"),
    "constraint_add": _Action(ConstraintStore, "add a rule the user stated", ("text",),
                              write="constraint"),
    "constraint_remove": _Action(ConstraintStore, "remove a rule by id", ("id",),
                                 write="constraint"),
    "note_add": _Action(NoteStore, "create a note", ("name", "content")),
    "note_get": _Action(NoteStore, "read a note by name or alias", ("name",)),
    "note_search": _Action(NoteStore, "search notes and archives", ("text",), ("limit",)),
    "note_write": _Action(NoteStore, "replace a note's content", ("name", "content")),
    "note_rename": _Action(NoteStore, "rename a note", ("name", "new_name")),
    "note_alias": _Action(NoteStore, "give a note another name", ("name", "alias")),
    "note_remove": _Action(NoteStore, "delete a note", ("name",)),
    "note_list": _Action(NoteStore, "list notes and archives"),
}

ALL_ACTIONS: tuple[str, ...] = tuple(_ACTIONS)

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
    inner = unwrap(provider)
    wanted: set[str] | None = None
    if actions_only is not None:
        wanted = set(actions_only)
        unknown = wanted - set(_ACTIONS)
        if unknown:
            raise ValueError(f"unknown memory tool actions: {', '.join(sorted(unknown))}")
    out = []
    for name, action in _ACTIONS.items():
        if action.capability is not None and not isinstance(inner, action.capability):
            continue
        if wanted is not None and name not in wanted:
            continue
        if (read_only_profile and name == "profile_update") or (
            read_only_soul and name == "soul_update"
        ):
            continue
        out.append(name)
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
    used: list[str] = []
    for name in actions:
        used.extend(p for p in _ACTIONS[name].params if p not in used)
    properties: dict[str, Any] = {
        "action": {"type": "string", "enum": actions, "description": "what to do"}
    }
    for param in used:
        schema = dict(_PARAMS[param].schema)
        if param == "scope":
            schema["enum"] = _scope_choices(actions)
        properties[param] = schema
    lines = [
        "Your long-term memory of this conversation and this user. Nothing said before is "
        "lost: search and expand recover it. Actions (parameters):"
    ]
    for name in actions:
        action = _ACTIONS[name]
        params = [*action.required, *(f"{p}?" for p in action.optional)]
        if name == "profile_rollback":
            params = [f"scope={'|'.join(_rollback_scopes(actions))}", "version"]
        lines.append(f"- {name}({', '.join(params)}): {action.summary}")
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
        choices.extend(_SEARCH_SCOPES)
    if "profile_history" in actions:
        choices.extend(s for s in _CHANGE_SCOPES if s not in choices)
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
        raise ToolArgumentError("arguments must be a JSON object like {\"action\": \"status\"}")
    return value


def _check_value(name: str, raw: Any, allow_empty: bool) -> Any:
    spec = _PARAMS[name]
    if spec.is_int:
        if isinstance(raw, bool):
            raise ToolArgumentError(f"{name} must be an integer, got a boolean")
        if isinstance(raw, float):
            if not math.isfinite(raw) or not raw.is_integer():
                raise ToolArgumentError(f"{name} must be a whole number")
            raw = int(raw)
        elif isinstance(raw, str) and raw.strip().lstrip("-").isdecimal() and len(raw) <= 20:
            raw = int(raw)
        if not isinstance(raw, int):
            raise ToolArgumentError(f"{name} must be an integer")
        if not spec.min_value <= raw <= spec.max_value:
            raise ToolArgumentError(
                f"{name} must be between {spec.min_value} and {spec.max_value}"
            )
        return raw
    if not isinstance(raw, str):
        raise ToolArgumentError(f"{name} must be a string")
    if spec.choices:
        raw = raw.strip().lower()
        if raw not in spec.choices:
            raise ToolArgumentError(f"{name} must be one of {', '.join(spec.choices)}")
        return raw
    if len(raw) > spec.max_chars:
        raise ToolArgumentError(
            f"{name} is too long ({len(raw)} characters, at most {spec.max_chars})"
        )
    if not allow_empty and not raw.strip():
        raise ToolArgumentError(f"{name} must not be empty")
    return raw


def validate_call(
    args: dict[str, Any], offered: list[str], provider_actions: list[str]
) -> tuple[str, dict[str, Any]]:
    """Check the action and its parameters; returns (action, cleaned params)."""
    action = args.get("action")
    if not isinstance(action, str) or not action.strip():
        raise ToolArgumentError(f"missing action: one of {', '.join(offered)}")
    action = action.strip()
    if action not in _ACTIONS:
        raise ToolArgumentError(f"unknown action {action[:60]!r}: one of {', '.join(offered)}")
    if action not in offered:
        if action in provider_actions:
            raise ToolArgumentError(f"action {action} is not allowed here")
        raise ToolArgumentError(f"action {action} is not supported by this memory provider")
    unknown = sorted(k for k in args if k != "action" and k not in _PARAMS)
    if unknown:
        shown = ", ".join(str(k)[:40] for k in unknown[:5])
        raise ToolArgumentError(f"unknown parameter(s): {shown}")
    spec = _ACTIONS[action]
    cleaned: dict[str, Any] = {}
    for name in spec.params:
        raw = args.get(name)
        if raw is None:
            if name in spec.required:
                raise ToolArgumentError(f"{action} needs {name}")
            continue
        cleaned[name] = _check_value(name, raw, name in spec.allow_empty)
    if action == "search" and "scope" in cleaned and cleaned["scope"] not in _SEARCH_SCOPES:
        raise ToolArgumentError(f"search scope must be one of {', '.join(_SEARCH_SCOPES)}")
    if action == "profile_rollback":
        scopes = _rollback_scopes(offered)
        if cleaned["scope"] not in scopes:
            raise ToolArgumentError(f"profile_rollback scope must be one of {', '.join(scopes)}")
    if action == "profile_history" and cleaned.get("scope", "") not in ("", *_CHANGE_SCOPES):
        raise ToolArgumentError(
            f"profile_history scope must be one of {', '.join(_CHANGE_SCOPES)}"
        )
    return action, cleaned


# --- execution ----------------------------------------------------------------------


@dataclass
class _Call:
    provider: Any
    session: Session
    params: dict[str, Any]
    offered: list[str]

    @property
    def owner(self) -> tuple[int, str]:
        return self.session.user_id, self.session.agent_id


async def run_tool(
    provider: Provider,
    session: Session,
    arguments: str | dict[str, Any] | None,
    *,
    allowed_actions: set[str] | None = None,
) -> str:
    """Execute one `memory` tool call for `session`; always returns text for the model.

    `allowed_actions` withholds actions (pass the set the schema was built with);
    writes are tagged with whatever change source the caller set in context."""
    provider_actions = tool_actions(provider)
    offered = [a for a in provider_actions if allowed_actions is None or a in allowed_actions]
    try:
        action, params = validate_call(parse_arguments(arguments), offered, provider_actions)
    except ToolArgumentError as exc:
        return f"error: {exc}"
    call = _Call(provider, session, params, offered)
    with with_session_id(session.id), with_user_id(session.user_id), with_agent_id(
        session.agent_id
    ):
        try:
            text = await _HANDLERS[action](call)
        except NotFound as exc:
            return f"not found: {exc}" if str(exc) else "not found"
        except MemoryError_ as exc:
            return f"error: {exc}" if str(exc) else f"error: {type(exc).__name__}"
        except Exception:
            log.exception("memory tool action %s failed", action)
            return f"error: the memory provider failed on {action}; try again later"
        if _ACTIONS[action].write:
            await _advance_snapshot(provider, session)
    if len(text) > MAX_OUTPUT_CHARS:
        text = text[:MAX_OUTPUT_CHARS] + "\n[output cut: narrow the request]"
    return text


async def _advance_snapshot(provider: Provider, session: Session) -> None:
    """After the session's own memory write, it sees that write (DESIGN §2 snapshots)."""
    if not isinstance(unwrap(provider), SessionSnapshotStore):
        return
    try:
        store = cast(SessionSnapshotStore, provider)  # (unwrap(provider) is one)
        await store.advance_snapshot(session.id, session.user_id, session.agent_id)
    except Exception:
        # The write itself succeeded; the session sees it from its next snapshot.
        log.warning("advancing the snapshot of session %s failed", session.id, exc_info=True)
    finally:
        snapshots.moved()


# --- rendering ----------------------------------------------------------------------


def _preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _constraints(entries: list[ConstraintEntry]) -> str:
    if not entries:
        return "no constraints"
    return "\n".join(f"[{e.id}] {e.text}" for e in entries)


async def _status(c: _Call) -> str:
    stats = await c.provider.stats(c.session)
    actions = ", ".join(c.offered)
    caps = ", ".join(capabilities_of(unwrap(c.provider))) or "none"
    lines = [
        f"provider: {c.provider.name} (capabilities: {caps})",
        f"session {c.session.id}: {stats.message_count} messages "
        f"({stats.token_count} tokens), {stats.summary_count} summaries, "
        f"context {stats.context_tokens} tokens",
    ]
    if stats.oldest_at or stats.newest_at:
        lines.append(f"span: {minute_utc(stats.oldest_at)} to {minute_utc(stats.newest_at)}")
    lines.append(f"actions: {actions}")
    return "\n".join(lines)


async def _search(c: _Call) -> str:
    query = SearchQuery(
        text=c.params["text"],
        scope=SearchScope(c.params.get("scope", SearchScope.BOTH)),
        limit=c.params.get("limit", DEFAULT_SEARCH_LIMIT),
        mode=SearchMode(c.params.get("mode", SearchMode.HYBRID)),
    )
    hits = await c.provider.search(c.session, query)
    shown = f"“{_preview(query.text, 60)}” ({query.mode}, {query.scope})"
    if not hits:
        return f"no results for {shown}"
    order = "newest first" if query.mode == SearchMode.SUBSTRING else "best first"
    lines = [f"{len(hits)} result(s) for {shown}, {order}:"]
    for hit in hits:
        head = f"[{hit.source_type} {hit.source_id}]"
        if hit.timestamp:
            head += f" {minute_utc(hit.timestamp)}"
        head += f", score {hit.score:.3g}"
        if hit.session_id and hit.session_id != c.session.id:
            head += ", in an earlier conversation"
        if hit.signals:
            head += f", found by {'+'.join(hit.signals)}"
        lines.append(head)
        lines.append(f"  {_preview(hit.content, 500)}")
    if any(h.source_type == "summary" for h in hits):
        lines.append("(describe or expand a summary id to see what it covers)")
    return "\n".join(lines)


def _render_describe(d: DescribeResult) -> str:
    return "\n".join([
        f"summary {d.summary_id}: {d.kind}, depth {d.depth}, {d.token_count} tokens, "
        f"{d.descendant_count} descendant(s), {minute_utc(d.earliest_at)} to {minute_utc(d.latest_at)}",
        f"parents (contain it): {', '.join(d.parent_ids) or 'none'}",
        f"children (built from): {', '.join(d.child_ids) or 'none (built from messages)'}",
        "content:",
        d.content,
    ])


async def _describe(c: _Call) -> str:
    return _render_describe(await c.provider.describe(c.params["summary_id"], c.session))


def _render_expand(r: ExpandResult, cap: int) -> str:
    lines: list[str] = []
    if r.children:
        lines.append(f"summary {r.summary_id} was condensed from {len(r.children)} summaries:")
        for ch in r.children:
            lines.append(f"[{ch.summary_id}] {ch.kind}, depth {ch.depth}, {ch.token_count} tokens")
            lines.append(f"  {ch.content}")
    if r.messages:
        lines.append(f"summary {r.summary_id} covers {len(r.messages)} message(s):")
        for m in r.messages:
            when = f" {minute_utc(m.created_at)}" if m.created_at else ""
            lines.append(f"#{m.seq} {m.role}{when} [{m.message_id}]: {m.content}")
    if not lines:
        lines.append(f"summary {r.summary_id} has nothing to expand")
    if r.truncated:
        lines.append(f"(cut at token_cap {cap}: ask with a larger token_cap, or expand children)")
    return "\n".join(lines)


async def _expand(c: _Call) -> str:
    cap = c.params.get("token_cap", DEFAULT_TOKEN_CAP)
    result = await c.provider.expand(c.params["summary_id"], cap, c.session)
    return _render_expand(result, cap)


async def _profile_get(c: _Call) -> str:
    text = await c.provider.get_profile(*c.owner)
    return text or "the profile is empty"


async def _profile_update(c: _Call) -> str:
    version = await c.provider.set_profile(*c.owner, c.params["content"])
    return f"profile updated (version {version})"


async def _soul_get(c: _Call) -> str:
    text = await c.provider.get_soul(*c.owner)
    return text or "the soul is empty"


async def _soul_update(c: _Call) -> str:
    version = await c.provider.set_soul(*c.owner, c.params["content"])
    return f"soul updated (version {version})"


def _render_change(e: ChangeEntry) -> str:
    versions = f"v{e.version_before if e.version_before is not None else '-'}" \
        f"->v{e.version_after if e.version_after is not None else '-'}"
    head = f"{versions} {minute_utc(e.created_at)} {e.scope} {e.action} by {e.source}"
    if e.scope == "constraint":
        return head  # the rows carry whole JSON lists: constraint_list shows the state
    parts = [head]
    if e.before_text:
        parts.append(f"  before: {_preview(e.before_text)}")
    if e.after_text:
        parts.append(f"  after: {_preview(e.after_text)}")
    return "\n".join(parts)


async def _profile_history(c: _Call) -> str:
    entries = await c.provider.read_changelog(
        *c.owner, c.params.get("scope", ""), c.params.get("limit", DEFAULT_HISTORY_LIMIT)
    )
    if not entries:
        return "no changes recorded"
    return "\n".join(_render_change(e) for e in entries)


async def _profile_rollback(c: _Call) -> str:
    scope, version = c.params["scope"], c.params["version"]
    new_version = await c.provider.rollback(*c.owner, scope, version)
    return f"{scope} restored to version {version} (now version {new_version})"


async def _constraint_list(c: _Call) -> str:
    return _constraints(await c.provider.get_constraints(*c.owner))


async def _constraint_add(c: _Call) -> str:
    entries = await c.provider.add_constraint(*c.owner, c.params["text"])
    return "constraint added; constraints now:\n" + _constraints(entries)


async def _constraint_remove(c: _Call) -> str:
    entries = await c.provider.remove_constraint(*c.owner, c.params["id"].strip())
    return f"constraint {c.params['id'].strip()} removed; constraints now:\n" + _constraints(entries)


def _note_head(n: NoteEntry) -> str:
    aliases = f" (aliases: {', '.join(n.aliases)})" if n.aliases else ""
    return f"{n.kind} {n.name!r}{aliases}, {minute_utc(n.created_at)}"


async def _note_add(c: _Call) -> str:
    note = await c.provider.note_add(c.session, c.params["name"].strip(), c.params["content"])
    return f"added {_note_head(note)}"


async def _note_get(c: _Call) -> str:
    note = await c.provider.note_get(c.session, c.params["name"].strip())
    return f"{_note_head(note)}:\n{note.content}"


async def _note_search(c: _Call) -> str:
    hits = await c.provider.note_search(
        c.session, c.params["text"], c.params.get("limit", DEFAULT_SEARCH_LIMIT)
    )
    if not hits:
        return f"no notes match {_preview(c.params['text'], 60)!r}"
    lines = []
    for hit in hits:
        lines.append(f"{_note_head(hit.entry)} score {hit.score:.3g}")
        lines.append(f"  {_preview(hit.entry.content, 500)}")
    return "\n".join(lines)


async def _note_write(c: _Call) -> str:
    note = await c.provider.note_write(c.session, c.params["name"].strip(), c.params["content"])
    return f"rewrote {_note_head(note)}"


async def _note_rename(c: _Call) -> str:
    note = await c.provider.note_rename(
        c.session, c.params["name"].strip(), c.params["new_name"].strip()
    )
    return f"renamed to {_note_head(note)}"


async def _note_alias(c: _Call) -> str:
    note = await c.provider.note_alias(c.session, c.params["name"].strip(), c.params["alias"].strip())
    return f"aliased: {_note_head(note)}"


async def _note_remove(c: _Call) -> str:
    await c.provider.note_remove(c.session, c.params["name"].strip())
    return f"removed note {c.params['name'].strip()!r}"


async def _note_list(c: _Call) -> str:
    notes = await c.provider.note_list(c.session)
    if not notes:
        return "no notes"
    return "\n".join(f"{_note_head(n)}: {_preview(n.content, 80)}" for n in notes)


_HANDLERS: dict[str, Handler] = {
    "status": _status,
    "search": _search,
    "describe": _describe,
    "expand": _expand,
    "profile_get": _profile_get,
    "profile_update": _profile_update,
    "soul_get": _soul_get,
    "soul_update": _soul_update,
    "profile_history": _profile_history,
    "profile_rollback": _profile_rollback,
    "constraint_list": _constraint_list,
    "constraint_add": _constraint_add,
    "constraint_remove": _constraint_remove,
    "note_add": _note_add,
    "note_get": _note_get,
    "note_search": _note_search,
    "note_write": _note_write,
    "note_rename": _note_rename,
    "note_alias": _note_alias,
    "note_remove": _note_remove,
    "note_list": _note_list,
}
