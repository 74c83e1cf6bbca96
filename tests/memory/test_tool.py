"""The memory tool: schema follows capabilities; run_tool survives hostile arguments."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from memory.actions.tool import ALL_ACTIONS, MAX_ARGUMENT_CHARS, build_tool, run_tool, tool_actions
from memory.contract.context import (
    agent_id_from_context,
    change_source_from_context,
    session_id_from_context,
    user_id_from_context,
    with_change_source,
)
from memory.contract.errors import Conflict, InvalidArgument, NotFound
from memory.contract.options import AppendOptions, WriteOptions
from memory.contract.tracing import TraceEvent, with_tracing
from memory.contract.types import (
    ChangeEntry,
    ConstraintEntry,
    DescribeResult,
    ExpandMessage,
    ExpandResult,
    Message,
    NoteEntry,
    NoteHit,
    NoteKind,
    SearchQuery,
    SearchResult,
    Session,
    SessionSnapshot,
    SessionStats,
)

ANA = Session("s-ana", "bot", 1, "telegram")
BOB = Session("s-bob", "bot", 2, "telegram")
T0 = datetime(2025, 1, 2, 3, 4, tzinfo=UTC)

NOTE_ACTIONS = {a for a in ALL_ACTIONS if a.startswith("note_")}
# Follow-ups cite stored messages (MessageReader), which these fakes do not keep.
FOLLOWUP_ACTIONS = {"followup_add", "followup_list", "followup_dismiss", "timezone_set"}
# The fact store's actions: tested through a real provider (tests/memory/test_fact_actions.py).
FACT_ACTIONS = {a for a in ALL_ACTIONS if a.startswith("fact_")}


class Core:
    """Provider core only."""

    name = "core"

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def bootstrap(self, session: Session) -> None: ...

    async def append(
        self, session: Session, *msgs: Message, options: AppendOptions | None = None
    ) -> None: ...

    async def assemble(self, session: Session, budget: int, fresh_tail: int) -> list[Message]:
        return []

    async def stats(self, session: Session) -> SessionStats:
        self.calls.append("stats")
        return SessionStats(
            message_count=12,
            token_count=340,
            summary_count=2,
            context_tokens=120,
            oldest_at=T0,
            newest_at=T0,
        )

    async def close(self) -> None: ...


class Full(Core):
    """Every capability but notes, held in dicts, checking ownership like a real one."""

    name = "full"

    def __init__(self) -> None:
        super().__init__()
        self.version = 0
        self.profile: dict[int, str] = {}
        self.soul: dict[int, str] = {}
        self.constraints: dict[int, list[ConstraintEntry]] = {}
        self.history: list[tuple[int, str, str]] = []  # (version, scope, text)
        self.changes: list[ChangeEntry] = []
        self.advanced: list[str] = []
        self.seen_context: list[tuple[str, int, str]] = []
        self.summaries = {"sum_a": 1, "sum_leaf": 1, "sum_b": 2}  # id -> owner user id

    def _write(self, user_id: int, agent_id: str, scope: str, before: str, after: str) -> int:
        self.seen_context.append(
            (session_id_from_context(), user_id_from_context(), agent_id_from_context())
        )
        self.version += 1
        self.history.append((self.version, scope, after))
        self.changes.append(
            ChangeEntry(
                user_id,
                agent_id,
                scope,
                "update",
                change_source_from_context().value,
                session_id_from_context(),
                self.version - 1,
                self.version,
                before,
                after,
                created_at=T0,
            )
        )
        return self.version

    async def search(self, session: Session, query: SearchQuery) -> list[SearchResult]:
        self.calls.append(f"search:{query.text}:{query.scope}:{query.mode}:{query.limit}")
        if query.text == "nothing":
            return []
        return [
            SearchResult("summary", "sum_a", "Ana likes " + "tea " * 200, 2.5, T0),
            SearchResult("message", "17", "tea at noon", 0.75),
        ]

    def _owned(self, summary_id: str, session: Session | None) -> None:
        owner = self.summaries.get(summary_id)
        if owner is None or (session is not None and owner != session.user_id):
            raise NotFound(f"summary {summary_id}")

    async def describe(self, summary_id: str, session: Session | None) -> DescribeResult:
        self._owned(summary_id, session)
        return DescribeResult(
            summary_id,
            "condensed",
            1,
            "Ana's tea habits",
            T0,
            T0,
            4,
            token_count=30,
            parent_ids=["sum_top"],
            child_ids=["sum_leaf"],
        )

    async def expand(
        self, summary_id: str, token_cap: int, session: Session | None
    ) -> ExpandResult:
        self._owned(summary_id, session)
        self.calls.append(f"expand:{token_cap}")
        msgs = [
            ExpandMessage("m1", 1, "user", "I like green tea", 5, T0),
            ExpandMessage("m2", 2, "assistant", "Noted!", 2, T0),
        ]
        return ExpandResult(summary_id, messages=msgs, truncated=True)

    async def get_profile(self, user_id: int, agent_id: str) -> str:
        return self.profile.get(user_id, "")

    async def set_profile(
        self, user_id: int, agent_id: str, content: str, options: WriteOptions | None = None
    ) -> int:
        if "\x00" in content:
            raise InvalidArgument("content holds a NUL character")
        before = self.profile.get(user_id, "")
        self.profile[user_id] = content
        return self._write(user_id, agent_id, "profile", before, content)

    async def get_soul(self, user_id: int, agent_id: str) -> str:
        return self.soul.get(user_id, "")

    async def set_soul(
        self, user_id: int, agent_id: str, content: str, options: WriteOptions | None = None
    ) -> int:
        before = self.soul.get(user_id, "")
        self.soul[user_id] = content
        return self._write(user_id, agent_id, "soul", before, content)

    async def get_constraints(self, user_id: int, agent_id: str) -> list[ConstraintEntry]:
        return list(self.constraints.get(user_id, []))

    async def add_constraint(
        self, user_id: int, agent_id: str, text: str, options: WriteOptions | None = None
    ) -> list[ConstraintEntry]:
        entries = self.constraints.setdefault(user_id, [])
        entries.append(ConstraintEntry(f"c{len(entries) + 1}", text.strip(), "2025-01-02T03:04:00"))
        self._write(user_id, agent_id, "constraint", "", text)
        return list(entries)

    async def remove_constraint(
        self,
        user_id: int,
        agent_id: str,
        constraint_id: str,
        options: WriteOptions | None = None,
    ) -> list[ConstraintEntry]:
        entries = self.constraints.get(user_id, [])
        kept = [e for e in entries if e.id != constraint_id]
        if len(kept) == len(entries):
            raise NotFound(f"no constraint with id {constraint_id!r}")
        self.constraints[user_id] = kept
        self._write(user_id, agent_id, "constraint", constraint_id, "")
        return list(kept)

    async def memory_version(self, user_id: int, agent_id: str) -> int:
        return self.version

    async def get_profile_at(self, user_id: int, agent_id: str, version: int) -> str:
        return next(
            (t for v, s, t in reversed(self.history) if s == "profile" and v <= version), ""
        )

    async def get_soul_at(self, user_id: int, agent_id: str, version: int) -> str:
        return next((t for v, s, t in reversed(self.history) if s == "soul" and v <= version), "")

    async def rollback(
        self,
        user_id: int,
        agent_id: str,
        scope: str,
        version: int,
        options: WriteOptions | None = None,
    ) -> int:
        if version > self.version:
            raise InvalidArgument(f"no version {version}: the current version is {self.version}")
        if scope == "profile":
            return await self.set_profile(
                user_id, agent_id, await self.get_profile_at(user_id, agent_id, version)
            )
        return await self.set_soul(
            user_id, agent_id, await self.get_soul_at(user_id, agent_id, version)
        )

    async def read_changelog(
        self, user_id: int, agent_id: str, scope: str = "", limit: int = 20
    ) -> list[ChangeEntry]:
        rows = [
            c
            for c in reversed(self.changes)
            if c.user_id == user_id and (not scope or c.scope == scope)
        ]
        return rows[:limit]

    async def get_or_create_snapshot(
        self, session_id: str, user_id: int, agent_id: str
    ) -> SessionSnapshot:
        return SessionSnapshot(session_id, user_id, agent_id, self.version)

    async def advance_snapshot(self, session_id: str, user_id: int, agent_id: str) -> None:
        self.advanced.append(session_id)


class Notes(Core):
    """Core + NoteStore."""

    name = "notes"

    def __init__(self) -> None:
        super().__init__()
        self.notes: dict[tuple[int, str], NoteEntry] = {}

    def _find(self, session: Session, name: str) -> NoteEntry:
        for (uid, _), note in self.notes.items():
            if uid == session.user_id and (note.name == name or name in note.aliases):
                return note
        raise NotFound(f"no note named {name!r}")

    async def note_add(
        self, session: Session, name: str, content: str, kind: NoteKind = NoteKind.NOTE
    ) -> NoteEntry:
        if (session.user_id, name) in self.notes:
            raise Conflict(f"a note named {name!r} exists")
        note = NoteEntry(len(self.notes) + 1, name, content, kind, [], T0)
        self.notes[(session.user_id, name)] = note
        return note

    async def note_rename(self, session: Session, name: str, new_name: str) -> NoteEntry:
        note = self._find(session, name)
        del self.notes[(session.user_id, note.name)]
        note.name = new_name
        self.notes[(session.user_id, new_name)] = note
        return note

    async def note_alias(self, session: Session, name: str, alias: str) -> NoteEntry:
        note = self._find(session, name)
        note.aliases.append(alias)
        return note

    async def note_write(self, session: Session, name: str, content: str) -> NoteEntry:
        note = self._find(session, name)
        note.content = content
        return note

    async def note_remove(self, session: Session, name: str) -> None:
        note = self._find(session, name)
        del self.notes[(session.user_id, note.name)]

    async def note_get(self, session: Session, name: str) -> NoteEntry:
        return self._find(session, name)

    async def note_list(self, session: Session) -> list[NoteEntry]:
        return [n for (uid, _), n in self.notes.items() if uid == session.user_id]

    async def note_search(self, session: Session, text: str, limit: int = 10) -> list[NoteHit]:
        notes = await self.note_list(session)
        return [NoteHit(n, 1.0) for n in notes if text.lower() in n.content.lower()][:limit]


async def call(provider: Any, args: Any, session: Session = ANA, **kw: Any) -> str:
    return await run_tool(
        provider, session, json.dumps(args) if isinstance(args, dict) else args, **kw
    )


# --- schema -------------------------------------------------------------------------


def actions_of(schema: dict[str, Any]) -> list[str]:
    return schema["function"]["parameters"]["properties"]["action"]["enum"]


def test_schema_shape_and_core_only() -> None:
    schema = build_tool(Core())
    assert schema["type"] == "function" and schema["function"]["name"] == "memory"
    params = schema["function"]["parameters"]
    assert params["required"] == ["action"] and params["additionalProperties"] is False
    assert actions_of(schema) == ["status"]
    assert set(params["properties"]) == {"action"}
    json.dumps(schema)  # must serialise as-is for the API


def test_actions_follow_capabilities() -> None:
    assert set(tool_actions(Full())) == (
        set(ALL_ACTIONS) - NOTE_ACTIONS - FOLLOWUP_ACTIONS - FACT_ACTIONS
    )
    assert set(tool_actions(Notes())) == {"status"} | NOTE_ACTIONS
    props = build_tool(Full())["function"]["parameters"]["properties"]
    assert {
        "text",
        "scope",
        "mode",
        "limit",
        "summary_id",
        "token_cap",
        "content",
        "id",
        "version",
        "question",
        "since",
        "before",
    } == set(props) - {"action"}
    assert props["scope"]["enum"] == [
        "both",
        "messages",
        "summaries",
        "profile",
        "soul",
        "constraint",
        "fact",
        "compaction",
    ]
    note_props = build_tool(Notes())["function"]["parameters"]["properties"]
    assert {"name", "new_name", "alias", "content", "text", "limit"} == set(note_props) - {"action"}


def test_traced_provider_gets_the_same_tool() -> None:
    assert build_tool(with_tracing(Full(), lambda e: None)) == build_tool(Full())


def test_actions_only_and_read_only_flags() -> None:
    schema = build_tool(
        Full(),
        actions_only=[
            "profile_get",
            "profile_update",
            "soul_get",
            "constraint_add",
            "profile_rollback",
        ],
    )
    assert actions_of(schema) == [
        "profile_get",
        "profile_update",
        "soul_get",
        "profile_rollback",
        "constraint_add",
    ]
    ro = tool_actions(Full(), read_only_profile=True, read_only_soul=True)
    assert "profile_update" not in ro and "soul_update" not in ro and "profile_get" in ro
    # Rollback stays only for the scopes that remain writable.
    schema = build_tool(Full(), read_only_profile=True, read_only_soul=True)
    assert "scope=constraint, version" in schema["function"]["description"]
    only_reads = tool_actions(Full(), actions_only=["profile_get", "profile_rollback"])
    assert only_reads == ["profile_get"]
    with pytest.raises(ValueError, match="profile_updat"):
        tool_actions(Full(), actions_only=["profile_updat"])
    with pytest.raises(ValueError, match="no actions"):
        build_tool(Core(), actions_only=["search"])


# --- hostile arguments --------------------------------------------------------------

HOSTILE: list[tuple[Any, str]] = [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('"status"', "must be a JSON object"),
    ("{}", "missing action"),
    ({"action": 123}, "missing action"),
    ({"action": "fly"}, "unknown action 'fly'"),
    ({"action": "note_add", "name": "x", "content": "y"}, "not supported by this memory provider"),
    ({"action": "search"}, "search needs text"),
    ({"action": "search", "text": None}, "search needs text"),
    ({"action": "search", "text": "   "}, "text must not be empty"),
    ({"action": "search", "text": ["a"]}, "text must be a string"),
    ({"action": "search", "text": "x" * 5000}, "text is too long"),
    ({"action": "search", "text": "a", "limit": 10**30}, "limit must be between 1 and 50"),
    ({"action": "search", "text": "a", "limit": 0}, "limit must be between 1 and 50"),
    ({"action": "search", "text": "a", "limit": True}, "boolean"),
    ({"action": "search", "text": "a", "limit": 2.5}, "whole number"),
    ('{"action": "search", "text": "a", "limit": 1e400}', "whole number"),
    ('{"action": "search", "text": "a", "limit": ' + "9" * 5000 + "}", "not valid JSON"),
    ({"action": "search", "text": "a", "scope": "profile"}, "search scope must be one of"),
    ({"action": "search", "text": "a", "mode": "regex"}, "mode must be one of"),
    ({"action": "search", "text": "a", "query": "b"}, "unknown parameter(s): query"),
    ({"action": "expand", "summary_id": "sum_a", "token_cap": -1}, "token_cap must be between"),
    ({"action": "profile_update"}, "profile_update needs content"),
    ({"action": "profile_update", "content": "x" * 30_000}, "content is too long"),
    (
        {"action": "profile_rollback", "scope": "compaction", "version": 1},
        "profile_rollback scope must be one of profile, soul, constraint",
    ),
    ({"action": "profile_rollback", "scope": "soul", "version": 2**60}, "version must be between"),
    ("x" * (MAX_ARGUMENT_CHARS + 1), "arguments are too large"),
    ("[" * 100_000 + "]" * 100_000, "arguments are too large"),
    ("[" * 20_000 + "]" * 20_000, "not valid JSON"),
]


@pytest.mark.parametrize(("args", "expected"), HOSTILE)
async def test_hostile_arguments_become_error_strings(args: Any, expected: str) -> None:
    provider = Full()
    out = await call(provider, args)
    assert out.startswith("error: ") and expected in out, out
    assert provider.version == 0 and provider.calls == []


async def test_withheld_action_is_refused_even_if_supported() -> None:
    provider = Full()
    out = await call(
        provider,
        {"action": "profile_update", "content": "x"},
        allowed_actions={"status", "profile_get"},
    )
    assert out == "error: action profile_update is not allowed here"
    # Read-only profile withholds rollback of the profile too.
    allowed = set(tool_actions(provider, read_only_profile=True))
    out = await call(
        provider,
        {"action": "profile_rollback", "scope": "profile", "version": 1},
        allowed_actions=allowed,
    )
    assert out.startswith("error: profile_rollback scope must be one of soul, constraint")
    assert provider.version == 0


async def test_numeric_strings_and_empty_arguments() -> None:
    provider = Full()
    await call(provider, {"action": "search", "text": "tea", "limit": "3"})
    assert provider.calls == ["search:tea:both:hybrid:3"]
    assert (await call(provider, "")).startswith("error: missing action")


# --- behaviour ----------------------------------------------------------------------


async def test_status() -> None:
    out = await call(Full(), {"action": "status"})
    assert "provider: full" in out and "Searcher" in out
    assert "12 messages (340 tokens), 2 summaries, context 120 tokens" in out
    assert "2025-01-02 03:04 UTC" in out and "actions: status, search" in out
    limited = await call(Full(), {"action": "status"}, allowed_actions={"status", "profile_get"})
    assert limited.endswith("actions: status, profile_get")


async def test_search_renders_ids_scores_snippets() -> None:
    provider = Full()
    out = await call(
        provider,
        {"action": "search", "text": "tea", "scope": "summaries", "mode": "substring", "limit": 5},
    )
    assert provider.calls == ["search:tea:summaries:substring:5"]
    lines = out.splitlines()
    assert (
        lines[0] == "2 result(s) for “tea” (substring, summaries), by conversation, newest first:"
    )
    assert lines[1] == "in no known conversation:"  # this provider names none
    assert lines[2] == "[summary sum_a] 2025-01-02 03:04 UTC, score 2.5"
    assert lines[3].startswith("  Ana likes tea") and len(lines[3]) <= 503
    assert lines[4] == "[message 17], score 0.75"
    assert "describe or expand" in out
    assert (
        await call(provider, {"action": "search", "text": "nothing"})
        == "no results for “nothing” (hybrid, both)"
    )


async def test_describe_and_expand_are_scoped_to_the_session_user() -> None:
    provider = Full()
    out = await call(provider, {"action": "describe", "summary_id": "sum_a"})
    assert "summary sum_a: condensed, depth 1, 30 tokens, 4 descendant(s)" in out
    assert "parents (contain it): sum_top" in out
    assert "children (built from): sum_leaf" in out and out.endswith("Ana's tea habits")
    out = await call(provider, {"action": "expand", "summary_id": "sum_a"})
    assert "covers 2 message(s)" in out
    assert "#1 user 2025-01-02 03:04 UTC [m1]: I like green tea" in out
    assert "cut at token_cap 4000" in out
    # Bob's summary id, asked from Ana's session, is "not found", same as a missing one.
    for action in ("describe", "expand"):
        foreign = await call(provider, {"action": action, "summary_id": "sum_b"})
        missing = await call(provider, {"action": action, "summary_id": "sum_zzz"})
        assert foreign.startswith("not found") and missing.startswith("not found")
    assert (await call(provider, {"action": "describe", "summary_id": "sum_b"}, BOB)).startswith(
        "summary sum_b"
    )


async def test_profile_write_uses_context_source_and_leaves_the_snapshot() -> None:
    provider = Full()
    with with_change_source("reflect"):
        out = await call(provider, {"action": "profile_update", "content": "Ana, Lisbon"})
    assert out == "profile updated (version 1)"
    assert provider.changes[0].source == "reflect" and provider.changes[0].session_id == "s-ana"
    assert provider.seen_context == [("s-ana", 1, "bot")]
    # Only a person's write moves the snapshot; the model's and reflect's wait for the
    # session's next compaction (the prompt's cached prefix stays).
    assert provider.advanced == []
    assert await call(provider, {"action": "profile_get"}) == "Ana, Lisbon"
    assert await call(provider, {"action": "profile_get"}, BOB) == "the profile is empty"
    assert (
        await call(provider, {"action": "soul_update", "content": ""}) == "soul updated (version 2)"
    )
    # The default source is `agent`.
    await call(provider, {"action": "profile_update", "content": "Ana, Porto"})
    assert provider.changes[-1].source == "agent"
    history = await call(provider, {"action": "profile_history", "scope": "profile"})
    assert history.splitlines()[0] == "v2->v3 2025-01-02 03:04 UTC profile update by agent"
    assert "before: Ana, Lisbon" in history and "after: Ana, Porto" in history
    out = await call(provider, {"action": "profile_rollback", "scope": "profile", "version": 1})
    assert out == "profile restored to version 1 (now version 4)"
    assert provider.profile[1] == "Ana, Lisbon" and provider.advanced == []
    out = await call(provider, {"action": "profile_rollback", "scope": "soul", "version": 99})
    assert out == "error: no version 99: the current version is 4"
    with with_change_source("user"):  # a person's write (/memory): seen from the next turn
        await call(provider, {"action": "profile_update", "content": "Ana, Faro"})
    assert provider.advanced == ["s-ana"]


async def test_constraints_round_trip_with_ids() -> None:
    provider = Full()
    assert await call(provider, {"action": "constraint_list"}) == "no constraints"
    out = await call(provider, {"action": "constraint_add", "text": "Never use emoji"})
    assert out.endswith("[c1] Never use emoji")
    await call(provider, {"action": "constraint_add", "text": "Answer in Portuguese"})
    assert (
        await call(provider, {"action": "constraint_list"})
        == "[c1] Never use emoji\n[c2] Answer in Portuguese"
    )
    out = await call(provider, {"action": "constraint_remove", "id": "c1"})
    assert out == "constraint c1 removed; constraints now:\n[c2] Answer in Portuguese"
    out = await call(provider, {"action": "constraint_remove", "id": "c9"})
    assert out == "not found: no constraint with id 'c9'"
    assert provider.advanced == []  # the model's writes: at the next compaction


async def test_store_errors_and_bugs_become_strings(caplog: pytest.LogCaptureFixture) -> None:
    provider = Full()
    out = await call(provider, {"action": "profile_update", "content": "a\x00b"})
    assert out == "error: content holds a NUL character" and provider.advanced == []

    async def broken(*_: Any) -> str:
        raise RuntimeError("password=hunter2 in a stack trace")

    provider.get_profile = broken  # type: ignore[method-assign]
    out = await call(provider, {"action": "profile_get"})
    assert out == "error: the memory provider failed on profile_get; try again later"
    assert "hunter2" not in out and "profile_get failed" in caplog.text


async def test_notes_round_trip() -> None:
    provider = Notes()
    assert await call(provider, {"action": "note_list"}) == "no notes"
    out = await call(provider, {"action": "note_add", "name": "trip", "content": "Rome in May"})
    assert out == "added Note 'trip', 2025-01-02 03:04 UTC"
    dup = await call(provider, {"action": "note_add", "name": "trip", "content": "again"})
    assert dup == "error: a note named 'trip' exists"
    await call(provider, {"action": "note_alias", "name": "trip", "alias": "holiday"})
    await call(provider, {"action": "note_write", "name": "holiday", "content": "Rome in June"})
    out = await call(provider, {"action": "note_get", "name": "trip"})
    assert out == "Note 'trip' (aliases: holiday), 2025-01-02 03:04 UTC:\nRome in June"
    await call(provider, {"action": "note_rename", "name": "trip", "new_name": "italy"})
    hits = await call(provider, {"action": "note_search", "text": "june", "limit": 3})
    assert hits.startswith("Note 'italy'") and "score 1" in hits
    assert (
        await call(provider, {"action": "note_get", "name": "trip"}, BOB)
        == "not found: no note named 'trip'"
    )
    assert (
        await call(provider, {"action": "note_remove", "name": "italy"}) == "removed note 'italy'"
    )
    assert await call(provider, {"action": "note_list"}) == "no notes"


async def test_calls_through_tracing_are_recorded() -> None:
    events: list[TraceEvent] = []
    traced = with_tracing(Full(), events.append)
    out = await call(traced, {"action": "profile_update", "content": "hello"})
    assert out == "profile updated (version 1)"
    assert [e.operation for e in events] == ["set_profile"]
    assert events[0].session_id == "s-ana"


# --- against the real shared stores (SQLite and PostgreSQL) -------------------------


async def test_tool_writes_through_shared_stores(engine: Any) -> None:
    from memory.storage.stores import SharedStores

    class StoreBacked(Core, SharedStores):
        name = "stores"

        def __init__(self, engine: Any) -> None:
            super().__init__()
            self.engine = engine

    provider = StoreBacked(engine)
    assert (await provider.get_or_create_snapshot("s-ana-other", 1, "bot")).version == 0
    assert (await provider.get_or_create_snapshot("s-ana", 1, "bot")).version == 0
    assert {"profile_update", "profile_rollback", "constraint_add"} <= set(tool_actions(provider))
    with with_change_source("reflect"):
        assert (
            await call(provider, {"action": "profile_update", "content": "Ana, Lisbon"})
            == "profile updated (version 1)"
        )
    out = await call(provider, {"action": "constraint_add", "text": "No emoji"})
    constraint_id = out.splitlines()[-1].split("]")[0].removeprefix("[")
    assert out.endswith(f"[{constraint_id}] No emoji")
    # Reflect's and the model's writes leave every snapshot where it was (the session's
    # next compaction moves it); a new session starts at the current version.
    assert (await provider.get_or_create_snapshot("s-ana", 1, "bot")).version == 0
    assert (await provider.get_or_create_snapshot("s-ana-new", 1, "bot")).version == 2
    assert (await provider.get_or_create_snapshot("s-ana-other", 1, "bot")).version == 0
    rows = await provider.read_changelog(1, "bot")
    assert [(r.scope, r.source, r.session_id) for r in rows] == [
        ("constraint", "agent", "s-ana"),
        ("profile", "reflect", "s-ana"),
    ]
    out = await call(provider, {"action": "constraint_remove", "id": constraint_id})
    assert out == f"constraint {constraint_id} removed; constraints now:\nno constraints"
    out = await call(provider, {"action": "profile_rollback", "scope": "constraint", "version": 2})
    assert out == "constraint restored to version 2 (now version 4)"
    assert await call(provider, {"action": "constraint_list"}) == f"[{constraint_id}] No emoji"
    assert await call(provider, {"action": "profile_get"}, BOB) == "the profile is empty"
    history = await call(provider, {"action": "profile_history", "scope": "profile"})
    assert history.startswith("v0->v1 ") and "profile create by reflect" in history
    assert (
        await call(provider, {"action": "profile_rollback", "scope": "soul", "version": 99})
    ).startswith("error: no version 99")
