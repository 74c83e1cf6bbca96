"""The compose file's `local-llm` profile serves embeddings, and the bot's environment
turns semantic search on through config.yaml."""

from __future__ import annotations

from pathlib import Path

import yaml

from bot.config.settings import interpolate, load_settings

ROOT = Path(__file__).resolve().parents[3]


def test_local_llm_profile_runs_an_embedding_server_the_bot_can_use(tmp_path: Path) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    embed = compose["services"]["embed"]
    assert embed["profiles"] == ["local-llm"] and "--embeddings" in embed["command"]
    env = {k: str(v) for k, v in compose["services"]["bot"]["environment"].items()}
    assert {"MNEMO_EMBEDDINGS_MODEL", "MNEMO_EMBEDDINGS_BASE_URL"} <= set(env)
    raw = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(interpolate(raw, {})), encoding="utf-8")
    assert load_settings(path).embeddings.model == ""  # off unless asked for
    turned_on = {
        "MNEMO_EMBEDDINGS_MODEL": "local",
        "MNEMO_EMBEDDINGS_BASE_URL": "http://embed:8080/v1",
    }
    path.write_text(yaml.safe_dump(interpolate(raw, turned_on)), encoding="utf-8")
    embeddings = load_settings(path).embeddings
    assert (embeddings.model, embeddings.base_url) == ("local", "http://embed:8080/v1")
