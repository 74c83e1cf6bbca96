"""The hostile corpus as the model's memory tool arguments, for every action and every
parameter, against the real providers and databases: `run_tool` always answers with
text the model can read (a result, `error: ...` or `not found`), never raises, never
shows a traceback, and leaves the stores consistent (`doctor`'s checks stay clean)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memory.actions.tool import _ACTIONS, run_tool, tool_actions
from memory.compaction.summarizer import StaticSummarizer
from memory.contract.capabilities import ProviderContext
from memory.contract.context import with_change_source
from memory.contract.maintenance import IntegrityChecker
from memory.contract.registry import create_provider
from memory.contract.tracing import unwrap
from memory.contract.types import ChangeSource, CompactionMode, Message, Session
from memory.testing.databases import temp_engine
from memory.transfer.integrity import check_shared
from tests.reliability.corpus import CORPUS, SMALL, looks_like_traceback

CASES = [
    pytest.param("sqlite", "lcm"),
    pytest.param("sqlite", "simple"),
    pytest.param("postgres", "lcm", marks=pytest.mark.postgres),
    pytest.param("postgres", "simple", marks=pytest.mark.postgres),
]

# Whole argument strings a model may send instead of a JSON object.
RAW_ARGUMENTS = [
    "",
    "null",
    "[]",
    "42",
    '"status"',
    "{",
    "{'action': 'status'}",
    '{"action": 1e999}',
    '{"action": "search", "text": "x", "limit": 1e999}',
    '{"action": "profile_rollback", "scope": "profile", "version": ' + "9" * 5000 + "}",
    "[" * 100_000,
    '{"action": "status", "action": "search"}',
    "\x00",
    '{"action": "status"' + ', "x": 1' * 20 + "}",
    json.dumps({"action": "x" * 70_000}),
]


def _values(label_value: tuple[str, str]) -> list[Any]:
    label, value = label_value
    out: list[Any] = [value]
    if label == "huge_integer":
        out += [int(value), -int(value), 2**63, -(2**63) - 1, 1e308, float("nan")]
    return out


@pytest.mark.parametrize(("db_kind", "provider_name"), CASES)
async def test_tool_arguments_corpus(db_kind: str, provider_name: str, tmp_path: Path) -> None:
    async with temp_engine(db_kind, tmp_path) as engine:
        provider = create_provider(
            provider_name,
            ProviderContext(
                engine=engine,
                summarizer=StaticSummarizer("summary"),
                agent_id="default",
                data_dir=tmp_path,
                config={"keep_tail": 1, "store_dir": str(tmp_path / "notes"), "leaf_chunk_size": 2},
            ),
        )
        try:
            session = Session(
                id="default:telegram:1", agent_id="default", user_id=1, channel="telegram"
            )
            await provider.bootstrap(session)
            await provider.append(
                session, *(Message(role="user", content=f"hello {i}") for i in range(6))
            )
            await provider.compact(session, CompactionMode.FULL)
            actions = tool_actions(provider)
            answers: list[tuple[str, str]] = []

            async def call(args: Any) -> None:
                with with_change_source(ChangeSource.AGENT):
                    out = await run_tool(provider, session, args)
                assert isinstance(out, str) and out.strip(), args
                assert not looks_like_traceback(out), (str(args)[:200], out[:300])
                answers.append((str(args)[:80], out))

            for raw in RAW_ARGUMENTS:
                await call(raw)
            for pair in CORPUS:
                for value in _values(pair):
                    await call({"action": value})  # the action itself
                    await call({"action": "status", value if isinstance(value, str) else "x": 1})
            for action in actions:
                spec = _ACTIONS[action]
                for param in spec.params:
                    base = {p: _VALID[p] for p in spec.required}
                    for pair in SMALL:
                        for value in _values(pair):
                            await call(json.dumps({"action": action, **base, param: value}))
            assert len(answers) > 500
            # A provider exception behind the generic line would be a bug the user's input
            # found: every refusal must come from validation, NotFound or the stores.
            crashed = [(a, out) for a, out in answers if "memory provider failed" in out]
            assert crashed == []
        finally:
            inner = unwrap(provider)
            faults = await check_shared(engine)
            if isinstance(inner, IntegrityChecker):
                faults += await inner.check_integrity()
            await provider.close()
        assert faults == []


_VALID: dict[str, Any] = {
    "text": "hello",
    "question": "what did I say?",
    "summary_id": "sum_0",
    "content": "some text",
    "id": "c1",
    "scope": "profile",
    "version": 1,
    "name": "a-note",
    "new_name": "b-note",
    "alias": "c-note",
    "mode": "full_text",
    "limit": 5,
    "token_cap": 500,
    "key": "home city",
    "value": "Berlin",
    "keys": ["city"],
}
