"""`mnemo memory import` fed malformed exports: wrong types, missing and unknown keys,
out-of-range integers, text no database can store, huge strings, duplicate ids, dangling
references, cycles in lcm's summary DAG, cross-user references, deep nesting. Each is
refused in one line naming the problem, with no traceback, and leaves the database
exactly as it was (a full dump of every table compared, and simple's notes files). The
exporter's own documents, for lcm and simple, are accepted and round-trip exactly.

The whole corpus runs in-process through `bot.ops.transfer.import_` (what the CLI calls); the
seven cases of issue #15 also run through `mnemo memory import` as a subprocess."""

from __future__ import annotations

import asyncio
import copy
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bot.ops import transfer
from memory.storage.db import create_engine
from memory.transfer.schema import MAX_DEPTH, validate_document
from tests.ops.conftest import ALICE, make_settings, populate
from tests.reliability.corpus import looks_like_traceback
from tests.reliability.process import REPO, write_config
from tests.waits import scaled

SID = "default:telegram:1001"  # as the bot names user 1001's private chat
REFUSED = "mnemo: import refused, nothing was written: "
NOT_JSON = "is not a JSON export: "

FRESH = "imported_"
Doc = dict[str, Any]


def _summary(doc: Doc, kind: str) -> dict[str, Any]:
    return next(s for s in doc["provider"]["data"]["summaries"] if s["kind"] == kind)


def _deep(n: int) -> Callable[[Doc], str]:
    """The document as text, its title an array nested `n` deep (json.dumps would
    recurse as deep, so the nesting is spliced into the text)."""

    def build(doc: Doc) -> str:
        doc["session"]["title"] = "@@DEEP@@"
        return json.dumps(doc).replace('"@@DEEP@@"', "[" * n + "]" * n)

    return build


def _cycle(doc: Doc) -> None:
    """Two condensed summaries at one depth, each containing the other."""
    a = _summary(doc, "condensed")
    b = copy.deepcopy(a)
    b["id"] = a["id"] + "b"
    a["child_ids"] = [b["id"]]
    b["child_ids"] = [a["id"]]
    doc["provider"]["data"]["summaries"].append(b)


def _set(*path: str | int, value: Any) -> Callable[[Doc], None]:
    def apply(doc: Doc) -> None:
        target: Any = doc
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return apply


def _drop(*path: str | int) -> Callable[[Doc], None]:
    def apply(doc: Doc) -> None:
        target: Any = doc
        for step in path[:-1]:
            target = target[step]
        del target[path[-1]]

    return apply


# The seven documents of issue #15: four gave tracebacks, three were accepted.
ISSUE = [
    (
        "huge_seq",
        _set("messages", 0, "seq", value=10**30),
        ".messages[0].seq: a huge integer is out of range",
    ),
    (
        "huge_user_id",
        _set("session", "user_id", value=2**64),
        ".session.user_id: 18446744073709551616 is out of range",
    ),
    (
        "lone_surrogate",
        _set("messages", 0, "content", value="broken \ud800 text"),
        ".messages[0].content: contains a lone UTF-16 surrogate",
    ),
    ("deeply_nested", _deep(100_000), f"nested deeper than {MAX_DEPTH} levels"),
    (
        "role_superuser",
        _set("messages", 0, "role", value="superuser"),
        ".messages[0].role: expected 'system', 'user', 'assistant' or 'tool', got 'superuser'",
    ),
    (
        "summary_own_parent",
        lambda d: _summary(d, "condensed")["child_ids"].append(_summary(d, "condensed")["id"]),
        "not 0",
    ),
    (
        "edited_user_id",
        lambda d: (
            _set("session", "user_id", value=2002)(d),
            _set("snapshot", "user_id", value=2002)(d),
        ),
        ".session: the session id names user 1001, but user_id is 2002",
    ),
]

OTHERS = [
    # Issue 20 item 7: summary data that does not cover the messages (doctor would have
    # reported a fault per message) is refused before anything is written.
    (
        "context_covers_nothing",
        _set("provider", "data", "context_items", value=[]),
        "the summaries and context items do not cover every message exactly once, in order "
        "(24 message_unreachable, ",
    ),
    (
        "context_item_repeated",
        lambda d: d["provider"]["data"]["context_items"].append(
            {**d["provider"]["data"]["context_items"][-1], "ordinal": 10**6}
        ),
        "exactly once, in order (1 context_order, ",
    ),
    # wrong types
    (
        "seq_as_string",
        _set("messages", 3, "seq", value="4"),
        ".messages[3].seq: expected an integer, got '4'",
    ),
    (
        "seq_as_float",
        _set("messages", 3, "seq", value=4.0),
        ".messages[3].seq: expected an integer",
    ),
    (
        "token_count_bool",
        _set("messages", 0, "token_count", value=True),
        ".messages[0].token_count: expected an integer",
    ),
    (
        "archived_as_string",
        _set("session", "archived", value="false"),
        ".session.archived: expected true or false",
    ),
    ("messages_as_object", _set("messages", value={}), ".messages: expected a list"),
    (
        "parts_as_string",
        _set("messages", 1, "parts", value="x"),
        ".messages[1].parts: expected a list",
    ),
    ("session_as_list", _set("session", value=[]), ".session: expected an object"),
    (
        "title_null",
        _set("session", "title", value=None),
        ".session.title: expected a string, got null",
    ),
    (
        "naive_timestamp",
        _set("messages", 2, "created_at", value="2026-03-01T12:00:00"),
        ".messages[2].created_at: expected an ISO-8601 timestamp with offset",
    ),
    (
        "not_a_timestamp",
        _set("session", "created_at", value="yesterday"),
        ".session.created_at: expected an ISO-8601",
    ),
    ("document_is_a_list", lambda d: "[]", "document: expected an object, got a list"),
    ("document_is_null", lambda d: "null", "document: expected an object, got null"),
    ("other_format", _set("format", value="other"), "not a mnemo session export"),
    ("other_version", _set("version", value=2), "export version 2 is not supported"),
    # missing and unknown keys
    ("missing_agent_id", _drop("session", "agent_id"), ".session.agent_id: missing"),
    (
        "missing_part_content",
        _drop("messages", 1, "parts", 0, "content"),
        ".messages[1].parts[0].content: missing",
    ),
    ("missing_user_memory", _drop("user_memory"), ".user_memory: missing"),
    ("unknown_top_key", _set("admin", value=True), ".admin: unknown key"),
    (
        "unknown_message_key",
        _set("messages", 0, "is_admin", value=True),
        ".messages[0].is_admin: unknown key",
    ),
    (
        "unknown_summary_key",
        lambda d: _summary(d, "leaf").update(x=1),
        ".provider.data.summaries[0].x: unknown key",
    ),
    # out of range, unstorable, too long
    (
        "negative_tokens",
        _set("messages", 0, "token_count", value=-1),
        ".messages[0].token_count: -1 is out of range",
    ),
    (
        "int32_overflow",
        _set("messages", 0, "token_count", value=2**31),
        ".messages[0].token_count: 2147483648 is out of range",
    ),
    (
        "nul_in_content",
        _set("messages", 0, "content", value="a\x00b"),
        ".messages[0].content: contains a NUL",
    ),
    (
        "surrogate_in_title",
        _set("session", "title", value="\udfff"),
        ".session.title: contains a lone UTF-16 surrogate",
    ),
    (
        "huge_title",
        _set("session", "title", value="t" * 100_000),
        ".session.title: 100000 characters, longer than the limit of 200",
    ),
    (
        "empty_session_id",
        _set("session", "id", value=""),
        ".session: the session id must not be empty",
    ),
    (
        "bad_constraints",
        _set("user_memory", "state", "constraints", value="not json"),
        ".user_memory.state.constraints: expected a JSON list of constraints",
    ),
    (
        "unknown_change_source",
        _set("user_memory", "changelog", 0, "source", value="root"),
        ".user_memory.changelog[0].source: expected",
    ),
    ("nested_medium_deep", _deep(MAX_DEPTH + 5), f"nested deeper than {MAX_DEPTH} levels"),
    # duplicate ids and numbering
    ("duplicate_seq", _set("messages", 4, "seq", value=1), ".messages[4].seq: 1 appears twice"),
    ("seq_gap", _set("messages", 4, "seq", value=99), ".messages[4].seq: expected 5"),
    (
        "duplicate_part_ordinal",
        _set("messages", 1, "parts", 1, "ordinal", value=0),
        ".messages[1]: two parts have the same ordinal",
    ),
    (
        "duplicate_summary_id",
        lambda d: d["provider"]["data"]["summaries"].append(copy.deepcopy(_summary(d, "leaf"))),
        "appears twice",
    ),
    (
        "duplicate_context_ordinal",
        lambda d: d["provider"]["data"]["context_items"][1].update(
            ordinal=d["provider"]["data"]["context_items"][0]["ordinal"]
        ),
        ".provider.data.context_items[1].ordinal:",
    ),
    # dangling references and cycles
    (
        "leaf_names_missing_message",
        lambda d: _summary(d, "leaf")["message_seqs"].append(999),
        "message_seqs: no message with seq 999",
    ),
    (
        "child_is_missing",
        lambda d: _summary(d, "condensed")["child_ids"].append("sum_nope"),
        "child_ids: no summary 'sum_nope'",
    ),
    (
        "context_names_missing_summary",
        _set("provider", "data", "context_items", 0, "summary_id", value="sum_nope"),
        ".provider.data.context_items[0]",
    ),
    (
        "context_names_both",
        lambda d: d["provider"]["data"]["context_items"][-1].update(
            summary_id=_summary(d, "leaf")["id"]
        ),
        "names exactly one of message_seq and summary_id",
    ),
    (
        "leaf_with_children",
        lambda d: _summary(d, "leaf")["child_ids"].append(_summary(d, "condensed")["id"]),
        "a leaf summary is at depth 0 and covers messages only",
    ),
    ("summary_cycle", _cycle, "child_ids"),
    # cross-user references
    (
        "snapshot_of_another_user",
        _set("snapshot", "user_id", value=4242),
        ".snapshot: belongs to user 4242",
    ),
    (
        "snapshot_of_another_agent",
        _set("snapshot", "agent_id", value="other"),
        ".snapshot: belongs to user 1001 agent 'other'",
    ),
    (
        "provider_mismatch",
        _set("provider", "name", value="simple"),
        "the export carries 'simple' provider data",
    ),
    # a valid document whose summary ids this database holds already (its source)
    (
        "summary_ids_taken",
        lambda d: json.dumps(d).replace(f'"{FRESH}', '"sum_'),
        "already exists in this database",
    ),
]

SIMPLE_ONLY = [
    (
        "marker_past_history",
        _set("provider", "data", "markers", 0, "through_seq", value=999),
        ".provider.data.markers[0].through_seq: 999 is not a message of this session",
    ),
    (
        "marker_unknown_key",
        _set("provider", "data", "markers", 0, "x", value=1),
        ".provider.data.markers[0].x: unknown key",
    ),
    (
        "notes_duplicate_id",
        lambda d: d["provider"]["data"]["notes"].append(
            copy.deepcopy(d["provider"]["data"]["notes"][0])
        ),
        ".provider.data.notes[1].id",
    ),
    (
        "notes_not_a_list",
        _set("provider", "data", "notes", value={}),
        ".provider.data.notes: expected a list",
    ),
]


async def _exported(settings: Any) -> Doc:
    out = io.StringIO()
    assert await transfer.export(settings, ALICE.id, "json", out=out) == 0
    doc = json.loads(out.getvalue())
    # As the bot names sessions (the id names the user), unlike the fixture's.
    doc["session"]["id"] = SID
    for change in doc["user_memory"]["changelog"]:
        change["session_id"] = SID
    return doc


async def _dump(url: str, notes: Path) -> dict[str, Any]:
    """Every row of every table, in a stable order, and the notes files' bytes."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            names = await conn.run_sync(lambda c: sorted(sa.inspect(c).get_table_names()))
            tables = {}
            for name in names:
                rows = (await conn.execute(sa.text(f'SELECT * FROM "{name}"'))).all()
                tables[name] = sorted(repr(tuple(r)) for r in rows)
    finally:
        await engine.dispose()
    return {"tables": tables, "files": await asyncio.to_thread(_files, notes)}


def _files(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _text(doc: Doc, damage: Callable[[Doc], Any]) -> str:
    doc = copy.deepcopy(doc)
    made = damage(doc)
    return made if isinstance(made, str) else json.dumps(doc)


async def _assert_refused(
    settings: Any,
    url: str,
    tmp_path: Path,
    base: Doc,
    cases: list[tuple[str, Callable[[Doc], Any], str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = await _dump(url, tmp_path / "notes")
    path = tmp_path / "hostile.json"
    for label, damage, message in cases:
        path.write_text(_text(base, damage), encoding="utf-8")
        code = await transfer.import_(settings, str(path))
        err = capsys.readouterr().err
        assert code == 1, (label, err)
        assert err.startswith(REFUSED) or NOT_JSON in err, (label, err)
        assert err.count("\n") == 1 and message in err, (label, err)
        assert not looks_like_traceback(err), label
    assert await _dump(url, tmp_path / "notes") == before
    # The untouched document goes in: the dump would have seen any write.
    path.write_text(json.dumps(base), encoding="utf-8")
    assert await transfer.import_(settings, str(path)) == 0
    assert await _dump(url, tmp_path / "notes") != before


@pytest.mark.slow  # subprocesses: `make test-slow`
async def test_hostile_lcm_exports_are_refused_whole(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = make_settings(db_url, tmp_path, "lcm")
    await populate(settings, tmp_path)
    # Summary ids are unique database-wide and the source's are here: renamed.
    base = json.loads(json.dumps(await _exported(settings)).replace('"sum_', f'"{FRESH}'))
    assert {s["kind"] for s in base["provider"]["data"]["summaries"]} == {"leaf", "condensed"}
    await _assert_refused(settings, db_url, tmp_path, base, ISSUE + OTHERS, capsys)


async def test_hostile_simple_exports_are_refused_whole(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = make_settings(db_url, tmp_path, "simple")
    await populate(settings, tmp_path)
    base = await _exported(settings)
    assert base["provider"]["data"]["markers"] and base["provider"]["data"]["notes"]
    await _assert_refused(settings, db_url, tmp_path, base, SIMPLE_ONLY, capsys)


@pytest.mark.parametrize("provider", ["lcm", "simple"])
async def test_every_exported_document_passes_the_schema(
    db_url: str, other_db_url: str, tmp_path: Path, provider: str
) -> None:
    source = make_settings(db_url, tmp_path, provider)
    target = make_settings(other_db_url, tmp_path / "target", provider)
    await populate(source, tmp_path)
    doc = await _exported(source)
    validate_document(doc, None if provider is None else _provider_stub(provider))
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert await transfer.import_(target, str(path)) == 0
    out = io.StringIO()
    assert await transfer.export(target, SID, "json", out=out) == 0
    assert json.loads(out.getvalue()) == doc


def _provider_stub(name: str) -> Any:
    from plugins.lcm.maintenance import LcmMaintenance
    from plugins.simple.maintenance import SimpleMaintenance

    cls = LcmMaintenance if name == "lcm" else SimpleMaintenance
    return type("Stub", (cls,), {"name": name})()


@pytest.mark.slow  # subprocesses: `make test-slow`
@pytest.mark.postgres
@pytest.mark.parametrize("db_kind", ["postgres"])
async def test_issue_cases_through_the_cli(db_url: str, tmp_path: Path) -> None:
    settings = make_settings(db_url, tmp_path, "lcm")
    await populate(settings, tmp_path)
    base = await _exported(settings)
    config = write_config(
        tmp_path / "config.yaml",
        {
            "database": {"url": db_url},
            "data_dir": str(tmp_path / "data"),
            "memory": {"provider": "lcm"},
            "llm": {"api_key": "test-key"},
        },
    )
    before = await _dump(db_url, tmp_path / "notes")
    for label, damage, message in ISSUE:
        path = tmp_path / f"{label}.json"
        path.write_text(_text(base, damage), encoding="utf-8")
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot.cli",
            "--config",
            str(config),
            "memory",
            "import",
            str(path),
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, raw_err = await asyncio.wait_for(proc.communicate(), scaled(120))
        err = raw_err.decode()
        assert proc.returncode == 1, (label, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (label, err)
        assert not looks_like_traceback(err) and out == b"", label
    assert await _dump(db_url, tmp_path / "notes") == before
