"""What a turn's memory calls returned, read back from the text the memory tool wrote
(memory/actions/provenance.py); which citations an answer keeps (memory/actions/citations.py); links
to the original messages (memory/actions/origins.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.actions import provenance
from memory.actions.citations import cite
from memory.actions.delegated_recall import Answer, Item
from memory.actions.origins import link
from memory.actions.provenance import Ref, last_turn, returned, uses
from memory.actions.tool import TOOL_NAME
from memory.contract.errors import NotFound
from memory.contract.types import Message, Origin, Session, ToolCall
from memory.storage import history
from memory.storage.db import write_transaction
from memory.storage.forgetting import delete_messages
from memory.storage.history import HistoryStore, SessionHistory, origins
from memory.transfer.session import export_session, import_session
from tests.memory.test_tool import ANA, T0, Full, call


def _turn(*calls: tuple[dict[str, Any], str]) -> list[Message]:
    out = [Message("user", "what do I drink?")]
    for n, (args, result) in enumerate(calls):
        out.append(Message("assistant", tool_calls=[ToolCall(f"c{n}", "memory", json.dumps(args))]))
        out.append(Message("tool", result, tool_call_id=f"c{n}", name="memory"))
    return [*out, Message("assistant", "Green tea [m1].")]


async def test_each_action_s_returned_ids_are_read_from_the_tool_s_own_text() -> None:
    provider = Full()
    provider.summaries["sum_a"] = ANA.user_id
    search = {"action": "search", "text": "tea"}
    expand = {"action": "expand", "summary_id": "sum_a"}
    describe = {"action": "describe", "summary_id": "sum_a"}
    missing = {"action": "expand", "summary_id": "sum_nope"}
    turn = _turn(
        (search, await call(provider, search)),
        (expand, await call(provider, expand)),
        (describe, await call(provider, describe)),
        (missing, await call(provider, missing)),
    )
    found = uses(turn)
    assert [(u.action, u.asked, u.failed) for u in found] == [
        ("search", "tea", False),
        ("expand", "sum_a", False),
        ("describe", "sum_a", False),
        ("expand", "sum_nope", True),
    ]
    assert found[0].returned == [Ref("summary", "sum_a"), Ref("message", "17")]
    assert found[1].returned == [Ref("message", "m1"), Ref("message", "m2")]
    assert found[2].returned == [Ref("summary", "sum_a")]
    assert set(returned(found)) == {"sum_a", "17", "m1", "m2"}
    assert provenance.TOOL_NAME == TOOL_NAME
    # The newest turn only: an earlier turn's calls are not this answer's.
    assert uses(last_turn([*turn, Message("user", "and now?"), Message("assistant", "hi")])) == []


def test_a_recall_s_sources_are_its_returned_ids() -> None:
    answer = Answer(
        "The code is [12].", [Item("12", "message", "code", T0), Item("sum_ab", "summary", "")]
    )
    turn = _turn(({"action": "recall", "question": "code?"}, answer.render()))
    [use] = uses(turn)
    assert (use.action, use.asked) == ("recall", "code?")
    assert use.returned == [Ref("message", "12"), Ref("summary", "sum_ab")]


def test_a_message_s_text_in_a_result_does_not_pass_for_a_hit() -> None:
    # A search snippet (indented) quoting a hit line is not one.
    result = "1 result(s) for “x”:\n[message 5], score 1\n  [message 999] planted"
    [use] = uses(_turn(({"action": "search", "text": "x"}, result)))
    assert use.returned == [Ref("message", "5")]


@pytest.mark.parametrize(
    ("answer", "shown", "kept"),
    [
        ("Tea [5].", "Tea [1].", ["5"]),
        ("Tea [message 5, 999] and [6].", "Tea [1] and [2].", ["5", "6"]),
        ("Made up [999].", "Made up.", []),
        ("[Alice] said [sic], see [docs](https://x.example/1).", None, []),
        ("On [2026-11-26] at [12:30], v[2] or [v2].", "On [2026-11-26] at [12:30], v or [v2].", []),
        ("See message 999 and [sum_deadbeef].", "See message 999 and.", []),
    ],
)
def test_an_answer_keeps_only_known_citations(
    answer: str, shown: str | None, kept: list[str]
) -> None:
    text, refs = cite(answer, {"5": "5", "6": "6"}, numbered=True, named=False)
    assert text == (answer if shown is None else shown)
    assert refs == kept


@pytest.mark.parametrize(
    ("origin", "url"),
    [
        (Origin("telegram", -1001234567, 42), "https://t.me/c/1234567/42"),
        (Origin("telegram", -1001234567, 42, 7), "https://t.me/c/1234567/7/42"),
        (Origin("telegram", 42, 5), None),  # a private chat
        (Origin("telegram", -4242, 5), None),  # a basic group
        (Origin("cli", -1001234567, 5), None),
        (None, None),
    ],
)
def test_links_open_supergroup_messages_only(origin: Origin | None, url: str | None) -> None:
    assert link(origin) == url


async def test_origins_are_stored_read_in_scope_exported_imported_and_forgotten(
    engine: AsyncEngine,
) -> None:
    """On the shared history (memory.storage.history), what every SQL provider stores."""
    store = HistoryStore(engine)
    ana, bob = Session("t:ana", "bot", 1, "telegram"), Session("t:bob", "bot", 2, "telegram")
    here = Origin("telegram", -1001234567, 42, 7)
    stored = await store.append(
        ana, Message("user", "tea at noon", origin=here), Message("assistant", "noted")
    )
    said, answered = (str(s.id) for s in stored)
    assert (await store.read_message(ana, said)).origin == here
    assert (await store.read_message(ana, answered)).origin is None
    with pytest.raises(NotFound):
        await store.read_message(bob, said)  # another user's id: not found, origin and all

    doc = await export_session(engine, ana.id)
    assert [m.get("origin") for m in doc["messages"]] == [
        {"channel": "telegram", "chat_id": -1001234567, "message_id": 42, "thread_id": 7},
        None,
    ]
    await store.append(bob, Message("user", "hello"))
    moved = {**doc, "session": {**doc["session"], "id": "t:ana2"}}
    await import_session(engine, moved)
    assert (await export_session(engine, "t:ana2"))["messages"] == doc["messages"]

    async with write_transaction(engine) as conn:
        conv_id = await store.conversation_id(ana.id, conn)
        assert conv_id is not None
        await delete_messages(conn, conv_id, [int(said)])
    async with engine.connect() as conn:
        left = (await conn.execute(sa.select(origins.c.message_id))).scalars().all()
    assert int(said) not in left and len(left) == 1  # the imported copy's


@pytest.mark.parametrize("recent", [history.RECENT_TURN_MESSAGES, 1])
async def test_an_answer_is_read_back_by_its_question_s_origin_and_linked_once_in_scope(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch, recent: int
) -> None:
    """`answered_turn` and `add_origin` (memory.contract.capabilities.AnswerOrigins) on the shared
    history: a turn ends at the next user message; a turn without a stored answer, or
    another session's, is not found; an answer's origin is written once, in scope. (1: the
    message answered is not among the newest, so the whole conversation is looked at.)"""
    monkeypatch.setattr(history, "RECENT_TURN_MESSAGES", recent)
    store = HistoryStore(engine)
    ana, bob = Session("t:ana", "bot", 1, "telegram"), Session("t:bob", "bot", 2, "telegram")
    asked, later, failed = (Origin("telegram", 5, n) for n in (10, 12, 14))
    searched = [ToolCall("c1", "memory", '{"action": "search", "text": "tea"}')]
    stored = await store.append(
        ana,
        Message("user", "tea?", origin=asked),
        Message("assistant", tool_calls=searched),
        Message("tool", "[message 1] tea", tool_call_id="c1", name="memory"),
        Message("assistant", "green [1]"),
    )
    await store.append(ana, Message("user", "coffee?", origin=later), Message("assistant", "no"))
    await store.append(ana, Message("user", "cake?", origin=failed))  # the model failed
    turn = await store.answered_turn(ana, asked)
    assert turn is not None and turn.answer_id == str(stored[-1].id)
    assert [m.content for m in turn.messages] == ["tea?", "", "[message 1] tea", "green [1]"]
    assert turn.messages[1].tool_calls == searched
    assert await store.answered_turn(ana, failed) is None
    assert await store.answered_turn(bob, asked) is None  # another session's question

    sent = Origin("telegram", 5, 11)
    assert not await store.add_origin(bob, turn.answer_id, sent)  # not bob's answer
    assert not await store.add_origin(ana, "11; drop", sent)
    assert await store.add_origin(ana, turn.answer_id, sent)
    assert not await store.add_origin(ana, turn.answer_id, Origin("telegram", 5, 99))
    assert (await store.read_message(ana, turn.answer_id)).origin == sent


class _Shared(SessionHistory):
    """A provider that is only the shared history (messages, read_message, load_*)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.history = HistoryStore(engine)


@pytest.mark.parametrize("recent", [provenance.RECENT, 2])
async def test_why_lists_only_what_the_caller_may_see(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch, recent: int
) -> None:
    monkeypatch.setattr(provenance, "RECENT", recent)  # 2: the turn is read from the whole
    provider = _Shared(engine)
    ana, bob = Session("t:ana", "bot", 1, "telegram"), Session("t:bob", "bot", 2, "telegram")
    [theirs] = await provider.history.append(bob, Message("user", "WOMBAT-99"))
    [mine] = await provider.history.append(ana, Message("user", "tea at noon"))
    assert await provenance.why(provider, ana) is None  # asked, not answered yet
    search = {"action": "search", "text": "tea"}
    result = f"2 result(s):\n[message {mine.id}], score 1\n  tea\n[message {theirs.id}], score 1"
    turn = _turn((search, result))[1:-1]
    await provider.history.append(
        ana, Message("user", "what do I drink?"), *turn, Message("assistant", f"Tea [{mine.id}].")
    )
    found = await provenance.why(provider, ana)
    assert found is not None and found.answer == f"Tea [{mine.id}]."
    [use] = found.calls
    assert (use.action, use.asked, use.returned) == (
        "search",
        "tea",
        [Ref("message", str(mine.id))],
    )
    assert found.cited == [Ref("message", str(mine.id))]
