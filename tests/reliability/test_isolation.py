"""Isolation: one user's memory never reaches another, through `/memory`, the memory
tool (the model calling it on the user's behalf) or guessed ids; private chats, groups
and forum topics (a group's memory belongs to the group); a user who is not
allowed leaves no rows. (Secrets in logs: test_logs.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.channels.telegram.handlers import NOT_ALLOWED
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram, User
from tests.reliability.conftest import ask
from tests.reliability.harness import live_bot, table_counts, tool_text
from tests.waits import eventually

PROVIDERS = ["simple", "lcm"]
ALICE, BOB, MALLORY = 42, 43, 99
GROUP, OTHER_GROUP = -100500, -100600
SECRET = "PLATYPUS"


def _ids(text: str) -> set[str]:
    """The ids an answer shows: search hits `[message 12]`, `[summary sum_ab]`,
    `[archive archive-x-1]`, and summary ids wherever they appear."""
    found = set(re.findall(r"\[(?:message|summary|archive|note) ([^\]\s]+)\]", text))
    return found | set(re.findall(r"\bsum_[0-9a-f]+\b", text))


def _files(root: Path) -> list[Path]:
    return sorted(root.rglob("*"))


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_user_cannot_reach_another_users_memory(
    provider: str, tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with live_bot(
        tmp_path,
        tg,
        llm,
        provider=provider,
        telegram={"admin_ids": [ALICE, BOB]},
        memory={"fresh_tail": 1},
        compaction={"keep_tail": 1},
    ) as bot:
        bob = tg.private(BOB, "Bob")
        for i in range(4):
            await ask(tg, bob, f"my {SECRET}-BOB secret number {i}")
        await ask(
            tg, bob, tool_text({"action": "profile_update", "content": f"Bob {SECRET}-BOB-PROFILE"})
        )
        await ask(tg, bob, f"/memory constrain never mention {SECRET}-BOB-RULE")
        has_notes = "note" in await ask(tg, bob, tool_text({"action": "status"}))
        if has_notes:
            await ask(
                tg,
                bob,
                tool_text(
                    {"action": "note_add", "name": "bob-secret", "content": f"{SECRET}-BOB-NOTE"}
                ),
            )
        compacted = await ask(tg, bob, "/compact")
        assert "Compacted" in compacted, compacted
        # Everything Bob can see about his own memory names the ids Alice will guess.
        bob_views = [
            await ask(tg, bob, line)
            for line in (
                f"/memory search {SECRET}",
                "/memory constraints",
                "/memory history",
                "/memory notes",
                tool_text({"action": "search", "text": SECRET}),
                tool_text({"action": "search", "text": "summary", "scope": "summaries"}),
            )
        ]
        assert SECRET in bob_views[0]  # Bob does find his own memory
        guesses = sorted(set().union(*(_ids(v) for v in bob_views)) - {str(BOB)})
        assert guesses, bob_views
        if provider == "lcm":  # Bob's summary ids are among what Alice tries
            sums = [g for g in guesses if g.startswith("sum_")]
            assert sums, guesses
            # ...and they are real: Bob himself can open them.
            assert f"Summary {sums[0]}" in await ask(tg, bob, f"/memory show {sums[0]}")
            assert f"Summary {sums[0]} " in await ask(tg, bob, f"/memory expand {sums[0]}")
        bob_rule_ids = re.findall(r"\[([^\]\s]+)\] never mention", bob_views[1])
        assert bob_rule_ids, bob_views[1]
        before = await table_counts(bot.engine)

        alice = tg.private(ALICE, "Alice")
        tries = [
            f"/memory search {SECRET}",
            "/memory profile",
            "/memory constraints",
            "/memory history",
            "/memory notes",
            "/memory notes bob-secret",
            "/memory rollback profile 1",
            "/memory rollback constraint 1",
            tool_text({"action": "search", "text": SECRET}),
            tool_text({"action": "search", "text": SECRET, "mode": "substring"}),
            tool_text({"action": "profile_get"}),
            tool_text({"action": "constraint_list"}),
            tool_text({"action": "profile_history"}),
            tool_text({"action": "profile_rollback", "scope": "profile", "version": 1}),
            tool_text({"action": "note_get", "name": "bob-secret"}),
            tool_text({"action": "note_search", "text": SECRET}),
            tool_text({"action": "note_list"}),
            tool_text({"action": "note_write", "name": "bob-secret", "content": "pwned"}),
            tool_text({"action": "note_remove", "name": "bob-secret"}),
        ]
        for guess in guesses:
            tries += [
                f"/memory show {guess}",
                f"/memory expand {guess}",
                f"/memory notes {guess}",
                f"/memory unconstrain {guess}",
                tool_text({"action": "describe", "summary_id": guess}),
                tool_text({"action": "expand", "summary_id": guess}),
                tool_text({"action": "note_get", "name": guess}),
            ]
        for rule in bob_rule_ids:
            tries += [
                f"/memory unconstrain {rule}",
                tool_text({"action": "constraint_remove", "id": rule}),
            ]
        for line in tries:
            answer = await ask(tg, alice, line)
            assert f"{SECRET}-BOB" not in answer, (line, answer[:300])

        # Bob's memory is exactly as he left it: Alice's writes touched only her own.
        assert f"{SECRET}-BOB-PROFILE" in await ask(tg, bob, "/memory profile")
        assert f"{SECRET}-BOB-RULE" in await ask(tg, bob, "/memory constraints")
        if has_notes:
            assert f"{SECRET}-BOB-NOTE" in await ask(
                tg, bob, tool_text({"action": "note_get", "name": "bob-secret"})
            )
        after = await table_counts(bot.engine)
        changed = {t for t in after if after[t] != before.get(t)}
        # Alice's own turns add history, her rollbacks/snapshots her own rows; nothing of
        # Bob's is deleted (counts never go down).
        assert all(after[t] >= before.get(t, 0) for t in after), (before, after)
        assert changed  # her turns were stored


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_groups_topics_and_private_chats_are_separate(
    provider: str, tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with live_bot(
        tmp_path, tg, llm, provider=provider, telegram={"group_mode": "always"}
    ) as bot:
        bob = User(BOB, "Bob")
        group = tg.group(GROUP, "Team", forum=True)
        topic = group.topic(7, "plans")
        other = tg.group(OTHER_GROUP, "Elsewhere")
        private = tg.private(BOB, "Bob")

        await ask(tg, topic, f"the group {SECRET}-GROUP plan", user=bob)
        await ask(tg, topic, f"/memory constrain group rule {SECRET}-GROUP-RULE", user=bob)
        await ask(
            tg,
            topic,
            tool_text({"action": "profile_update", "content": f"{SECRET}-GROUP-PROFILE"}),
            user=bob,
        )
        await ask(tg, private, f"my private {SECRET}-PRIVATE thought")
        await ask(tg, private, f"/memory constrain private rule {SECRET}-PRIVATE-RULE")

        def reads() -> list[str]:
            return [
                f"/memory search {SECRET}",
                "/memory constraints",
                "/memory profile",
                tool_text({"action": "search", "text": SECRET}),
                tool_text({"action": "search", "text": SECRET, "mode": "substring"}),
                tool_text({"action": "constraint_list"}),
                tool_text({"action": "profile_get"}),
            ]

        # The other group sees nothing of either.
        for line in reads():
            answer = await ask(tg, other, line, user=bob)
            assert f"{SECRET}-" not in answer, (line, answer[:300])
        # The private chat never sees the group's memory, the group never the private one.
        for line in reads():
            answer = await ask(tg, private, line)
            assert f"{SECRET}-GROUP" not in answer, (line, answer[:300])
            answer = await ask(tg, topic, line, user=bob)
            assert f"{SECRET}-PRIVATE" not in answer, (line, answer[:300])
        # A second topic is another conversation of the same group: it shares the group's
        # rules (one memory scope per group), not the first topic's history.
        second = group.topic(8, "other")
        assert f"{SECRET}-GROUP-RULE" in await ask(tg, second, "/memory constraints", user=bob)
        status = await ask(tg, second, "/memory status", user=bob)
        assert f"{GROUP}:8" in status and f"{GROUP}:7" not in status
        assert bot.services.conversations is not None


async def test_disallowed_user_leaves_no_rows(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    async with live_bot(tmp_path, tg, llm, telegram={"allowed_ids": [ALICE]}) as bot:
        alice = tg.private(ALICE)
        assert "echo: hi" in await ask(tg, alice, "hi")
        # The turn's last writes: once sent, the answer is linked to its Telegram message,
        # and then her name is recorded (for the console).
        before = await eventually(
            lambda: table_counts(bot.engine),
            lambda counts: counts["message_origins"] == 2 and counts["people"] == 1,
            what="the answer's origin and her name stored",
        )
        files_before = _files(Path(bot.settings.data_dir))
        mallory = tg.private(MALLORY)
        group = tg.group(GROUP)
        for line in (
            "hello",
            "/start",
            "/new",
            "/compact",
            "/memory constrain x",
            "/memory search x",
            tool_text({"action": "note_add", "name": "x", "content": "y"}),
        ):
            assert await ask(tg, mallory, line) == NOT_ALLOWED
            # In a group that is not allowed either, even when addressed.
            assert await ask(tg, group, f"@{tg.username} {line}", user=User(MALLORY)) == NOT_ALLOWED
        mallory.send_photo()
        await tg.wait_for(lambda: len(tg.bot_messages(MALLORY)) == 8)
        assert await table_counts(bot.engine) == before
        assert _files(Path(bot.settings.data_dir)) == files_before
        assert len(llm.requests) == 1  # only Alice's turn reached the model
