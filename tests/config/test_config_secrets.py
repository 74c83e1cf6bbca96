"""Secrets in the loaded settings: never in repr, str or model_dump (a log line or a
traceback that shows the settings shows none), the real value where it is used."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.channels.telegram.channel import require_token
from bot.config.settings import load_settings
from bot.model.client import LLMClient, MissingApiKey, require_api_key

TOKEN = "424242:AAH-bot-secret-part"
API_KEY = "sk-live-4f8a2c9e71d3"
EMBED_KEY = "sk-embed-77aa"
HOOK = "hook-secret-991"
DB_PASSWORD = "hunter2-db-pass"


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    monkeypatch.delenv("MNEMO_CONFIG", raising=False)
    path = tmp_path / "config.yaml"
    path.write_text(
        f"telegram: {{token: '{TOKEN}', webhook: {{secret_token: {HOOK}}}}}\n"
        f"llm: {{api_key: {API_KEY}}}\nembeddings: {{api_key: {EMBED_KEY}}}\n"
        f"database: {{url: 'postgresql+psycopg://u:{DB_PASSWORD}@db/m'}}\n",
        encoding="utf-8",
    )
    return load_settings(path)


def test_no_secret_in_repr_str_or_dump(settings) -> None:  # noqa: ANN001
    shown = [
        repr(settings),
        str(settings),
        repr(settings.model_dump()),
        settings.model_dump_json(),
        repr(settings.telegram),
        repr(settings.llm),
        repr(settings.database),
    ]
    for text in shown:
        for secret in (TOKEN, TOKEN.partition(":")[2], API_KEY, EMBED_KEY, HOOK, DB_PASSWORD):
            assert secret not in text, (secret, text[:200])


async def test_every_use_site_gets_the_real_value(settings) -> None:  # noqa: ANN001
    assert require_token(settings) == TOKEN
    assert settings.telegram.webhook.secret_token.get_secret_value() == HOOK
    assert settings.embeddings.api_key.get_secret_value() == EMBED_KEY
    require_api_key(settings.llm)  # a set key passes
    client = LLMClient(settings.llm)
    try:
        assert client._client.api_key == API_KEY
    finally:
        await client.close()
    settings.llm.api_key = type(settings.llm.api_key)("  ")
    with pytest.raises(MissingApiKey):
        require_api_key(settings.llm)
