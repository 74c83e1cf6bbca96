"""One reflect cycle end to end: a conversation, the fake model calling the memory tool,
the stores, the changelog, the session's snapshot and the watermark."""

from __future__ import annotations

import json
import logging

from bot.jobs.reflect import REFLECT_ACTIONS
from memory.contract.capabilities import MessageReader
from memory.contract.context import with_change_source
from memory.contract.tracing import unwrap
from memory.contract.types import Message, Session
from tests.fakes.openai_server import error, text, tool_calls

ANA = Session("tg:100", "default", 100, "telegram")


def memory_call(action: str, **params: str) -> tuple[str, dict]:
    return ("memory", {"action": action, **params})


async def talk(provider, session: Session, user: str, reply: str = "ok") -> None:
    await provider.append(session, Message("user", user), Message("assistant", reply))


def user_prompt(request: dict) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "user")


async def test_cycle_writes_memory_with_source_reflect(reflector, provider, fake_llm) -> None:
    await provider.get_or_create_snapshot(ANA.id, ANA.user_id, ANA.agent_id)  # first turn
    await talk(
        provider,
        ANA,
        "I'm Ana and I live in Lisbon. Please answer in Portuguese from now on. Never use emoji.",
    )
    fake_llm.push(
        tool_calls(
            [
                memory_call("profile_update", content="Name: Ana\nLives in Lisbon"),
                memory_call("soul_update", content="Answer in Portuguese."),
                memory_call("constraint_add", text="Never use emoji."),
            ]
        ),
        text("profile, soul and one constraint updated"),
    )

    report = await reflector.run_cycle()

    assert (report.reviewed, report.changes, report.failed) == (1, 3, 0)
    assert [s.status for s in report.sessions] == ["changed"]
    assert await provider.get_profile(100, "default") == "Name: Ana\nLives in Lisbon"
    assert await provider.get_soul(100, "default") == "Answer in Portuguese."
    assert [c.text for c in await provider.get_constraints(100, "default")] == ["Never use emoji."]

    *rows, review = reversed(await provider.read_changelog(100, "default"))
    assert [(r.scope, r.source, r.session_id) for r in rows] == [
        ("profile", "reflect", ANA.id),
        ("soul", "reflect", ANA.id),
        ("constraint", "reflect", ANA.id),
    ]
    assert [(r.version_before, r.version_after) for r in rows] == [(0, 1), (1, 2), (2, 3)]
    # The review's own row, last: the versions it spanned and the writes it made.
    assert (review.scope, review.action, review.source) == ("reflect", "review", "reflect")
    assert (review.version_before, review.version_after) == (0, 3)
    assert review.after_text.startswith("3 change(s): profile_update, soul_update, constraint_add")
    # The running session keeps its view until its next compaction (cached prefix).
    snapshot = await provider.get_or_create_snapshot(ANA.id, 100, "default")
    assert snapshot.version == 0
    info = await provider.load_info(ANA.id)
    assert await reflector.state.watermark(ANA.id) == info.last_active

    # The model saw the conversation, the current memory and only reflect's actions.
    first = fake_llm.requests[0]
    assert "live in Lisbon" in user_prompt(first)
    [tool] = first["tools"]
    # followup_add where the provider keeps messages to cite (not the reference one).
    cites = isinstance(unwrap(provider), MessageReader)
    expected = [a for a in REFLECT_ACTIONS if cites or a != "followup_add"]
    assert tool["function"]["parameters"]["properties"]["action"]["enum"] == expected
    assert "only for a rule the user stated" in first["messages"][0]["content"]

    # No new activity: the next cycle asks the model nothing.
    calls = len(fake_llm.requests)
    again = await reflector.run_cycle()
    assert again.sessions == [] and len(fake_llm.requests) == calls

    # New activity: reviewed again, from the watermark on (the old part is not resent).
    await talk(provider, ANA, "By the way, I got a cat called Miau.")
    later = await reflector.run_cycle()
    assert [s.status for s in later.sessions] == ["unchanged"]
    assert len(fake_llm.requests) == calls + 1
    prompt = user_prompt(fake_llm.requests[-1])
    assert "Miau" in prompt and "Portuguese from now on" not in prompt
    assert "Name: Ana" in prompt  # the current profile, to merge into
    assert await reflector.state.watermark(ANA.id) == (await provider.load_info(ANA.id)).last_active


async def test_reflect_never_moves_a_running_sessions_snapshot(
    reflector, provider, fake_llm
) -> None:
    early = Session("tg:1", "default", 7, "telegram")
    other = Session("tg:2", "default", 7, "telegram")
    # A stored profile first: a snapshot at version 0 reads as "current" (the contract's
    # "V <= 0 means current"), so freezing is only observable from version 1 on.
    with with_change_source("user"):
        await provider.set_profile(7, "default", "Likes tea.")
    for s in (early, other):
        assert (await provider.get_or_create_snapshot(s.id, 7, "default")).version == 1
    await talk(provider, early, "I am a nurse.")
    await talk(provider, other, "What's the weather like?")
    fake_llm.push(
        tool_calls([memory_call("profile_update", content="Likes tea.\nWorks as a nurse.")]),
        text("profile updated"),
        text("no changes"),  # the review of `other` writes nothing
    )

    report = await reflector.run_cycle()
    assert [(s.session_id, s.status) for s in report.sessions] == [
        (early.id, "changed"),
        (other.id, "unchanged"),
    ]

    async def profile_seen(s: Session) -> str:
        snap = await provider.get_or_create_snapshot(s.id, 7, "default")
        return await provider.get_profile_at(7, "default", snap.version)

    nurse = "Likes tea.\nWorks as a nurse."
    # Frozen, the reviewed session too: its next compaction moves it (tests/bot,
    # tests/reflect/test_bot_integration.py), a new session (/new) starts at the newest.
    assert await profile_seen(early) == "Likes tea."
    assert await profile_seen(other) == "Likes tea."
    newcomer = Session("tg:3", "default", 7, "telegram")
    assert await profile_seen(newcomer) == nurse

    # Another review writing for `other` leaves its snapshot too.
    await talk(provider, other, "Please call me Jo.")
    fake_llm.push(
        tool_calls([memory_call("soul_update", content="Call the user Jo.")]), text("soul updated")
    )
    await reflector.run_cycle()
    assert await profile_seen(other) == "Likes tea."
    snap = await provider.get_or_create_snapshot(other.id, 7, "default")
    assert await provider.get_soul_at(7, "default", snap.version) == ""


async def test_llm_failure_keeps_watermark_and_others_proceed(
    reflector, provider, fake_llm
) -> None:
    sessions = [Session(f"tg:{i}", "default", i, "telegram") for i in (1, 2, 3)]
    for s in sessions:
        await talk(provider, s, f"I was born in city number {s.user_id}.")
    fake_llm.push(
        error(500),  # first session: the model fails (max_retries=0: no retry)
        tool_calls([memory_call("profile_update", content="Born in city 2.")]),
        text("done"),
        text("no changes"),
    )
    report = await reflector.run_cycle()
    assert [(s.session_id, s.status) for s in report.sessions] == [
        ("tg:1", "failed"),
        ("tg:2", "changed"),
        ("tg:3", "unchanged"),
    ]
    assert "HTTP 500" in report.sessions[0].detail
    assert await reflector.state.watermark("tg:1") is None
    assert await reflector.state.watermark("tg:2") is not None
    assert await provider.get_profile(2, "default") == "Born in city 2."

    # The failed session is retried by the next cycle, alone.
    fake_llm.push(
        tool_calls([memory_call("profile_update", content="Born in city 1.")]), text("done")
    )
    retry = await reflector.run_cycle()
    assert [(s.session_id, s.status) for s in retry.sessions] == [("tg:1", "changed")]
    assert await provider.get_profile(1, "default") == "Born in city 1."


async def test_bad_tool_calls_write_nothing_and_are_not_counted(
    reflector, provider, fake_llm
) -> None:
    await talk(provider, ANA, "Forget everything and delete my notes!")
    fake_llm.push(
        tool_calls(
            [
                memory_call("constraint_remove", id="c_1"),  # not offered to reflect
                memory_call("profile_update"),  # no content
                ("memory", "{not json"),
            ]
        ),
        text("nothing durable"),
    )
    report = await reflector.run_cycle()
    assert [(s.status, s.changes) for s in report.sessions] == [("unchanged", 0)]
    # Nothing written: the only row is the review's, which says so.
    [review] = await provider.read_changelog(100, "default")
    assert review.scope == "reflect" and review.after_text.startswith("no change")
    assert review.version_before == review.version_after
    results = [m["content"] for m in fake_llm.requests[1]["messages"] if m["role"] == "tool"]
    assert len(results) == 3 and all(r.startswith("error") for r in results)
    assert "not allowed" in results[0]


async def test_batch_takes_least_recently_attempted_first(engine, provider, llm, fake_llm) -> None:
    from tests.reflect.conftest import make_reflector

    reflector = make_reflector(engine, provider, llm, batch=2)
    sessions = [Session(f"s{i}", "default", i, "cli") for i in range(3)]
    for s in sessions:
        await talk(provider, s, "hello")
    first = await reflector.run_cycle()
    assert [s.session_id for s in first.sessions] == ["s0", "s1"]
    for s in sessions:  # everyone active again: the never-reviewed one goes first
        await talk(provider, s, "again")
    second = await reflector.run_cycle()
    assert [s.session_id for s in second.sessions] == ["s2", "s0"]


async def test_provider_without_reviewer_is_skipped(engine, llm, fake_llm, caplog) -> None:
    from tests.reflect.conftest import make_reflector

    class NoReview:  # a provider with profile stores and sessions but no Reviewer
        name = "bare"

        def __init__(self, inner) -> None:
            self._inner = inner

        async def get_profile(self, *a): ...
        async def set_profile(self, *a): ...
        async def get_soul(self, *a): ...
        async def set_soul(self, *a): ...
        async def list_info(self, *a): ...

    from memory.testing.reference import provider_class

    reflector = make_reflector(engine, NoReview(provider_class(False, False)(engine)), llm)
    with caplog.at_level(logging.INFO, logger="bot.jobs.reflect"):
        for _ in range(2):
            report = await reflector.run_cycle()
            assert "lacks Reviewer and SessionManager" in report.skipped
    skipped = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 2  # one line per cycle, nothing else
    assert fake_llm.requests == []


def test_tool_arguments_in_requests_are_json() -> None:
    # Guard for the helper above: the fake server sends arguments as JSON text.
    name, args = memory_call("profile_update", content="x")
    assert name == "memory" and json.loads(json.dumps(args))["action"] == "profile_update"
