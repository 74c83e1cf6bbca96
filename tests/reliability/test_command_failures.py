"""A command that fails says why in words a user understands: the model server down,
over quota, refusing the key; never only "failed on my side", never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config.settings import LLMSettings
from bot.model.client import LLMClient
from memory.compaction.summarizer import LLMSummarizer
from tests.fakes.openai_server import FakeOpenAI, error, truncated
from tests.fakes.telegram_server import FakeTelegram
from tests.reliability.conftest import ask
from tests.reliability.corpus import looks_like_traceback
from tests.reliability.harness import API_KEY, live_bot, table_counts


def summary_client(base_url: str) -> LLMClient:
    """The summarizer's own client, as `build_summarizer` makes it (max_retries 2)."""
    settings = LLMSettings.model_validate(
        {"base_url": base_url, "api_key": API_KEY, "timeout_s": 3, "max_retries": 2}
    )
    return LLMClient(settings, backoff_s=0.01, backoff_cap_s=0.02)


@pytest.mark.parametrize(
    ("provider", "fault", "reason"),
    [
        ("simple", error(503), "the language model answered HTTP 503"),
        ("lcm", error(429), "the language model is rate-limiting us"),
        ("lcm", error(401), "the language model refused our API key"),
    ],
)
async def test_compact_failing_says_why(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, provider: str, fault: object, reason: str
) -> None:
    summaries = summary_client(llm.base_url)
    try:
        async with live_bot(
            tmp_path,
            tg,
            llm,
            provider=provider,
            summarizer=LLMSummarizer(summaries.generate),
            compaction={"keep_tail": 1},
        ):
            chat = tg.private(1)
            for i in range(4):
                await ask(tg, chat, f"message {i}")
            llm.push(*[fault] * 3)  # every attempt of the summary (max_retries 2)
            answer = await ask(tg, chat, "/compact")
            assert reason in answer, answer
            assert "nothing was changed" in answer and not looks_like_traceback(answer)
            assert "on my side" not in answer
    finally:
        await summaries.close()


async def test_compact_with_the_model_server_unreachable(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    summaries = summary_client("http://127.0.0.1:9/v1")  # nothing listens on port 9
    try:
        async with live_bot(
            tmp_path,
            tg,
            llm,
            summarizer=LLMSummarizer(summaries.generate),
            compaction={"keep_tail": 1},
        ):
            chat = tg.private(1)
            for i in range(4):
                await ask(tg, chat, f"message {i}")
            answer = await ask(tg, chat, "/compact")
            assert "the language model could not be reached" in answer, answer
    finally:
        await summaries.close()


@pytest.mark.parametrize("provider", ["simple", "lcm"])
async def test_a_summary_cut_at_the_length_limit_changes_nothing(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, provider: str
) -> None:
    """`finish_reason: length`: the summary misses its end, so it must not replace what
    it summarizes; the next, complete summary does."""
    summaries = summary_client(llm.base_url)
    try:
        async with live_bot(
            tmp_path,
            tg,
            llm,
            provider=provider,
            summarizer=LLMSummarizer(summaries.generate),
            compaction={"keep_tail": 1},
        ) as bot:
            chat = tg.private(1)
            for i in range(4):
                await ask(tg, chat, f"message {i}")
            before = await table_counts(bot.engine)
            llm.push(truncated("The user sent messages 0, 1 and"))
            answer = await ask(tg, chat, "/compact")
            assert "the summary was cut off (finish_reason: length)" in answer, answer
            assert "nothing was changed" in answer
            after = await table_counts(bot.engine)
            del before["usage_records"], after["usage_records"]
            assert after == before  # no summary stored, the context untouched
            assert "Compacted" in await ask(tg, chat, "/compact")
    finally:
        await summaries.close()
