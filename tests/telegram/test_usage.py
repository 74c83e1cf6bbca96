"""Usage through Telegram: /memory status shows the user's tokens, and a user over the
daily limit gets one line saying when it resets, their message stored and not answered
(and not answered again after a restart); an admin is exempt."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from bot.app.services import build_services
from bot.channels.telegram.channel import build_application, running
from bot.config.settings import Settings
from memory.storage.usage import usage_records
from memory.text.tokens import estimate_tokens
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.telegram_server import FakeTelegram


def settings_for(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path, limit: int = 300, **llm_keys: str
) -> Settings:
    return Settings.model_validate(
        {
            "data_dir": str(tmp_path / "data"),
            "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"},
            "llm": {
                "base_url": llm.base_url,
                "api_key": "k",
                "timeout_s": 5,
                "max_retries": 1,
                **llm_keys,
            },
            "telegram": {"token": tg.token, "base_url": tg.base_url, "admin_ids": [7]},
            "compaction": {"max_tokens": -1},
            "limits": {"tokens_per_day": limit},
        }
    )


async def test_status_and_the_daily_limit(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    settings = settings_for(tg, llm, tmp_path)
    services = await build_services(settings)
    app = build_application(settings, services.conversations, engine=services.engine)
    try:
        async with running(app, settings, poll_timeout=1, drain_s=1):
            tg.private(42).send("hello")
            await tg.wait_for_message(42, contains="echo: hello")
            async with services.engine.connect() as conn:
                spent = await conn.scalar(
                    sa.select(
                        sa.func.sum(
                            usage_records.c.prompt_tokens + usage_records.c.completion_tokens
                        )
                    ).where(usage_records.c.user_id == 42)
                )
            assert spent and spent >= 300  # the memory tool's schema alone is hundreds
            tg.private(42).send("/memory status")
            status = await tg.wait_for_message(42, contains="Usage (UTC)")
            assert f"today {spent:,} tokens" in status.text and "of 300" in status.text
            asked = len(llm.requests)
            tg.private(42).send("and now?")
            refusal = await tg.wait_for_message(42, contains="today's 300 tokens")
            assert "I saved your message" in refusal.text and "00:00 UTC" in refusal.text
            assert len(llm.requests) == asked
            tg.private(7).send("admin here")  # exempt
            await tg.wait_for_message(7, contains="echo: admin here")
        history = await services.provider.load_history("default:telegram:42")
        assert [m.content for m in history][-1] == "and now?"
        # The next start owes nothing: the refused message is not answered then either.
        app = build_application(settings, services.conversations, engine=services.engine)
        asked = len(llm.requests)
        async with running(app, settings, poll_timeout=1, drain_s=1):
            tg.private(7).send("still there?")
            await tg.wait_for_message(7, contains="echo: still there?")
        assert len(llm.requests) == asked + 1
    finally:
        await services.close()


async def test_a_transcription_is_the_users_usage(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    settings = settings_for(tg, llm, tmp_path, limit=0, transcription_model="whisper-1")
    llm.push_transcription(text("buy oat milk"))
    services = await build_services(settings)
    app = build_application(settings, services.conversations, engine=services.engine)
    try:
        async with running(app, settings, poll_timeout=1, drain_s=1):
            tg.private(42).send_voice(content=b"OggS-fake")
            await tg.wait_for_message(42, contains="buy oat milk")
        async with services.engine.connect() as conn:
            rows = (await conn.execute(sa.select(usage_records))).all()
    finally:
        await services.close()
    by_kind = {r.kind: r for r in rows}
    assert sorted(by_kind) == ["chat", "transcription"]
    spoken = by_kind["transcription"]
    assert (spoken.user_id, spoken.model, spoken.estimated) == (42, "whisper-1", True)
    assert spoken.completion_tokens == estimate_tokens("buy oat milk")
