"""Wiring of the reflect job (plugins/reflect) into the bot: the plugin takes its LLM
conversation as an injected callable, and this is where the bot's own tool loop
(`bot.runner.run_turn`) is handed to it, so the project has one tool loop."""

from __future__ import annotations

from typing import Any

from bot.runner import Tool, run_turn
from memory.types import Message
from plugins.reflect import ReflectConfig, Reflector, TurnRunner


def reflect_turn_runner(llm: Any, max_rounds: int) -> TurnRunner:
    """`TurnRunner` over the bot's tool loop and LLM client (retries included)."""

    async def run(prompt: list[Message], schema: dict[str, Any], handler: Any) -> str:
        result = await run_turn(llm, prompt, [Tool(schema, handler)], max_rounds=max_rounds)
        return result.text

    return run


def build_reflector(services: Any) -> Reflector:
    """The Reflector of a running app (`bot.app.Services`)."""
    settings = services.settings
    return Reflector(
        services.engine,
        services.provider,
        reflect_turn_runner(services.llm, settings.llm.max_tool_rounds),
        ReflectConfig.from_settings(settings),
    )
