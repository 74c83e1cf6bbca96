"""Delegated recall (`/memory ask`, the tool's `recall`) on the real bot and the fake
servers: a fact planted before two compactions is found and its message id cited; a
question with nothing behind it says so; another user's fact is never returned, even when
the recall model cites its guessed id; the model's recall calls are counted as usage."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from memory.actions.delegated_recall import NOTHING_FOUND, SYSTEM_PROMPT, cited_nothing
from memory.storage.usage import usage_records
from tests.fakes.openai_server import FakeOpenAI, Response, error, hang, text
from tests.fakes.telegram_server import FakeTelegram, User
from tests.reliability.conftest import ask
from tests.reliability.harness import live_bot, scripted, tool_text

PROVIDERS = ["simple", "lcm"]
ALICE, BOB = 42, 43
PLANTED = "my locker code is PLATYPUS-7731"


class RecallModel:
    """The scripted chat model, plus a recall model that reads its material the way a
    reader of top hits would: it cites each item holding `needle`, and `guesses` (ids it
    makes up), or says NOTHING when no item holds the needle and it has no guess."""

    def __init__(self) -> None:
        self.needle = "PLATYPUS"
        self.guesses: list[str] = []
        self.requests: list[str] = []
        self.systems: list[str] = []
        self.script: list[Response] = []  # answers before reading, in order

    def __call__(self, body: dict[str, Any]) -> Response:
        msgs = body.get("messages") or []
        system = str(msgs[0].get("content") or "") if msgs else ""
        if not system.startswith(SYSTEM_PROMPT):
            return scripted(body)
        prompt = str(msgs[-1].get("content") or "")
        self.requests.append(prompt)
        self.systems.append(system)
        if self.script:
            return self.script.pop(0)
        lines = prompt.partition("Material:\n")[2].splitlines()
        ids = [line[1 : line.index("]")] for line in lines if self.needle in line]
        if not ids and not self.guesses:
            return text("NOTHING")
        if not self.guesses:
            return text("The locker code is in " + " ".join(f"[{i}]" for i in ids) + ".")
        # Guesses mixed into one citation and named in words, as a model might.
        named = " ".join(f"message {g}" for g in self.guesses)
        return text(f"The locker code is in [{', '.join(ids + self.guesses)}], see {named}.")


def message_ids(answer: str) -> list[str]:
    return re.findall(r"\[message (\d+)\]", answer)


def offered(answer: str) -> list[str]:
    """The ids of the items an answer that cites nothing offers instead."""
    return re.findall(r"^- (?:message|summary|archive|note) (\S+?)[: ]", answer, re.M)


def cited(answer: str) -> list[str]:
    sources = answer.partition("Sources: ")[2]
    return re.findall(r"(?:message|summary|archive|note) ([^\s,()]+)", sources)


@pytest.mark.parametrize(
    "db_kind", [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]
)
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_ask_cites_the_planted_message_and_never_another_users(
    provider: str, db_kind: str, tg: FakeTelegram, tmp_path: Path
) -> None:
    model = RecallModel()
    async with (
        FakeOpenAI(model) as llm,
        live_bot(
            tmp_path,
            tg,
            llm,
            provider=provider,
            db_kind=db_kind,
            memory={"fresh_tail": 1},
            compaction={"keep_tail": 1},
        ) as bot,
    ):
        bob = tg.private(BOB, "Bob")
        await ask(tg, bob, "the locker code is WOMBAT-99 for my gym")
        bob_ids = message_ids(await ask(tg, bob, "/memory search WOMBAT"))
        assert bob_ids

        alice = tg.private(ALICE, "Alice")
        await ask(tg, alice, PLANTED)
        # The message and the echo of it; the user's own comes first.
        planted = sorted(message_ids(await ask(tg, alice, "/memory search PLATYPUS")), key=int)
        assert len(planted) == 2, planted
        for i in range(3):
            await ask(tg, alice, f"filler about the weather number {i}")
        assert "Compacted" in await ask(tg, alice, "/compact")
        for i in range(3):
            await ask(tg, alice, f"more filler about gardening {i}")
        assert "Compacted" in await ask(tg, alice, "/compact")

        answer = await ask(tg, alice, "/memory ask what is my locker code?")
        assert planted[0] in cited(answer), answer
        assert "PLATYPUS" not in answer or "Sources:" in answer
        assert model.requests and "PLATYPUS-7731" in model.requests[-1]

        assert re.search(rf"message {planted[0]} \(\d{{4}}-\d\d-\d\d\)", answer), answer

        # Words only the summaries hold: lcm expands them down to the planted message;
        # simple reads its archives (handoff summaries, which here do not hold it).
        answer = await ask(tg, alice, "/memory ask what did the talk cover?")
        if provider == "lcm":
            assert planted[0] in cited(answer), answer
        else:
            assert "(archive)" in model.requests[-1], model.requests[-1]

        # Nothing behind the question: no model call, a plain answer.
        before = len(model.requests)
        assert await ask(tg, alice, "/memory ask zebra migration?") == NOTHING_FOUND
        assert len(model.requests) == before

        # Bob's message id guessed by the recall model: dropped, so nothing is cited;
        # what it read (Alice's own) is offered, never Bob's.
        model.needle, model.guesses = "WOMBAT", bob_ids
        answer = await ask(tg, alice, "/memory ask what is the locker code at the gym?")
        assert answer.startswith("I read ") and "cited none" in answer, answer
        assert "WOMBAT" not in answer and not set(bob_ids) & set(offered(answer)), answer
        assert all("WOMBAT" not in r for r in model.requests)
        # ...and guessed next to a real citation, it is cut out of the answer.
        model.needle = "PLATYPUS"
        answer = await ask(tg, alice, "/memory ask what is my locker code?")
        assert planted[0] in cited(answer) and not set(bob_ids) & set(cited(answer)), answer
        said = answer.partition("Sources:")[0]
        assert not any(re.search(rf"\b{b}\b", said) for b in bob_ids), answer

        # The model calls it as a tool action; the result reaches it with the citation.
        model.guesses = []
        reply = await ask(
            tg, alice, tool_text({"action": "recall", "question": "what is my locker code?"})
        )
        assert reply.startswith("tool said:") and planted[0] in cited(reply), reply

        # In a group, the group's memory: Alice's private fact is not in it.
        group = tg.group(-100500, "Team")
        answer = await ask(
            tg, group, "/memory ask what is my locker code?", user=User(ALICE, "Alice")
        )
        assert answer == NOTHING_FOUND, answer

        async with bot.engine.connect() as conn:
            rows = (
                await conn.execute(
                    sa.select(usage_records.c.user_id).where(usage_records.c.kind == "recall")
                )
            ).all()
        assert rows and {r.user_id for r in rows} == {ALICE}


async def test_ask_searches_again_within_its_rounds_and_stops_at_its_time_limit(
    tg: FakeTelegram, tmp_path: Path
) -> None:
    model = RecallModel()
    async with (
        FakeOpenAI(model) as llm,
        live_bot(tmp_path, tg, llm, provider="lcm", recall={"max_rounds": 2, "timeout_s": 0.5}),
    ):
        alice = tg.private(ALICE, "Alice")
        await ask(tg, alice, PLANTED)
        await ask(tg, alice, "we planted tomatoes in the garden")
        planted = sorted(message_ids(await ask(tg, alice, "/memory search PLATYPUS")), key=int)

        # The first search (garden) misses; the model asks for another, which finds it.
        model.script = [text("SEARCH: locker code")]
        answer = await ask(tg, alice, "/memory ask what did I say about the garden?")
        assert planted[0] in cited(answer), answer
        assert "locker" not in model.requests[-2] and "PLATYPUS" in model.requests[-1]
        # The last round may not search again: its prompt does not offer it, and a
        # SEARCH reply there is not followed.
        model.script = [text("SEARCH: locker"), text("SEARCH: again")]
        answer = await ask(tg, alice, "/memory ask what did I say about the garden?")
        assert "SEARCH:" in model.systems[-2] and "SEARCH:" not in model.systems[-1]
        # Material read, nothing cited: said so (not "found nothing"), the top hits offered
        # with their ids, dates and first words.
        read = re.match(r"I read (\d+) ", answer)
        assert read and answer.startswith(cited_nothing(int(read[1]))), answer
        assert planted[0] in offered(answer), answer
        assert re.search(rf"^- message {planted[0]} \(\d{{4}}-\d\d-\d\d\): my locker", answer, re.M)

        # Too slow: the model is named (narrowing the question would not help), with what
        # was read so far offered.
        model.script = [hang()]
        answer = await ask(tg, alice, "/memory ask what is my locker code?")
        assert answer.startswith("The recall model was too slow: no answer within 0.5 s"), answer
        assert "ask more narrowly" not in answer and planted[0] in offered(answer), answer

        # The recall model failing (retries spent): said plainly, to people and the model.
        model.script = [error(400)]
        answer = await ask(tg, alice, "/memory ask what is my locker code?")
        assert answer.startswith("I could not ask my recall model: "), answer
        model.script = [error(400)]
        reply = await ask(tg, alice, tool_text({"action": "recall", "question": "locker code?"}))
        assert reply.startswith("tool said: error: I could not ask my recall model: "), reply


async def test_ask_is_refused_over_the_token_limit(tg: FakeTelegram, tmp_path: Path) -> None:
    model = RecallModel()
    async with (
        FakeOpenAI(model) as llm,
        live_bot(tmp_path, tg, llm, provider="simple", limits={"tokens_per_day": 1}),
    ):
        alice = tg.private(ALICE, "Alice")
        await ask(tg, alice, PLANTED)  # answered: the limit is checked before a call
        answer = await ask(tg, alice, "/memory ask what is my locker code?")
        assert answer.startswith("Sorry, you have used up your tokens"), answer
        assert model.requests == []
        assert "PLATYPUS" in await ask(tg, alice, "/memory search PLATYPUS")
