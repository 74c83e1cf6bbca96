"""The `embeddings` config section: defaults, ranges, prefixes, and its API key kept secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app.services import build_embedder
from bot.config.settings import ConfigError, load_settings
from memory.search.semantic import PREFIX_PRESETS


def test_defaults_are_off_and_fall_back_to_the_llm_server(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("llm: {base_url: 'http://llm:8080/v1'}\n")
    settings = load_settings(path, check_provider=False)
    assert settings.embeddings.model == "" and settings.embeddings.batch_size == 64


@pytest.mark.parametrize("bad", ["batch_size: 0", "batch_size: 5000", "max_chars: 10"])
def test_a_value_out_of_range_names_the_key(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"embeddings: {{{bad}}}\n")
    with pytest.raises(ConfigError, match=rf"embeddings\.{bad.split(':')[0]}: "):
        load_settings(path, check_provider=False)


def test_the_embeddings_api_key_never_shows_in_an_error(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("embeddings: {api_key: [sk-embed-secret-123]}\n")
    with pytest.raises(ConfigError) as err:
        load_settings(path, check_provider=False)
    assert "embeddings.api_key" in str(err.value) and "sk-embed-secret-123" not in str(err.value)
    path.write_text(
        "embeddings: {api_key: sk-embed-secret-123, model: sk-embed-secret-123x}\n"
        "memory: {provider: sk-embed-secret-123}\n"
    )
    with pytest.raises(ConfigError) as err:
        load_settings(path)
    assert "sk-embed-secret-123" not in str(err.value)


@pytest.mark.parametrize(
    ("section", "pair"),
    [
        ("{}", ("", "")),
        ("{prefixes: e5}", ("query: ", "passage: ")),
        ("{prefixes: nomic}", ("search_query: ", "search_document: ")),
        ("{prefixes: bge, document_prefix: 'doc: '}", (PREFIX_PRESETS["bge"][0], "doc: ")),
        ("{query_prefix: 'q: '}", ("q: ", "")),
        ("{prefixes: e5, query_prefix: ''}", ("", "passage: ")),
    ],
)
def test_prefixes_come_from_a_preset_or_the_keys_which_win(
    tmp_path: Path, section: str, pair: tuple[str, str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"embeddings: {section}\n")
    settings = load_settings(path, check_provider=False)
    assert settings.embeddings.prefix_pair() == pair


def test_the_embedder_gets_the_prefixes_and_an_unknown_preset_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("embeddings: {model: multilingual-e5-small, prefixes: e5}\n")
    embedder = build_embedder(load_settings(path, check_provider=False))
    assert (embedder.query_prefix, embedder.document_prefix) == ("query: ", "passage: ")
    assert embedder.api_model == "multilingual-e5-small" != embedder.model
    path.write_text("embeddings: {prefixes: e6}\n")
    with pytest.raises(ConfigError, match=r"embeddings\.prefixes: .*e5, nomic, bge"):
        load_settings(path, check_provider=False)


@pytest.mark.parametrize("with_next", [None, True, False])
async def test_with_next_decides_whether_messages_are_embedded_with_the_next(
    tmp_path: Path, with_next: bool | None
) -> None:
    from bot.ops.common import open_memory
    from memory.search.semantic.backlog import sources_of

    path = tmp_path / "c.yaml"
    key = "" if with_next is None else f"with_next: {str(with_next).lower()}, "
    path.write_text(
        f"embeddings: {{{key}model: m}}\n"
        f"database: {{url: 'sqlite+aiosqlite:///{tmp_path / 'm.db'}'}}\n"
    )
    settings = load_settings(path, check_provider=False)
    async with open_memory(settings, create=True) as opened:
        names = [s.name for s in sources_of(opened.provider)]
    assert ("message_next" in names) == (with_next is not False)  # on by default
    assert "message" in names
    path.write_text("embeddings: {with_next: sometimes}\n")
    with pytest.raises(ConfigError, match=r"embeddings\.with_next: "):
        load_settings(path, check_provider=False)
