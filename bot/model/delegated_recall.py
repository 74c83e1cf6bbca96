"""The bot's delegated recall sub-call (memory.actions.delegated_recall): its model and bounds
from the settings. The model is `llm.recall_model`, else `llm.summary_model`, else
`llm.model`; its calls are recorded as usage kind `recall`, so they count against the
user's limits like a chat round (they are the user's request, not background work)."""

from __future__ import annotations

from typing import Any

from bot.config.settings import Settings
from bot.model.client import LLMClient, LLMError
from bot.model.tool_loop import Completer
from memory.actions.delegated_recall import Bounds, Recaller, RecallModelFailed


def recall_model(settings: Settings) -> str:
    llm = settings.llm
    return llm.recall_model or llm.summary_model or llm.model


def recaller_for(llm: Completer, settings: Settings) -> Recaller:
    """The sub-call on `llm` (a test's stand-in completer: its own model, no usage)."""
    model = recall_model(settings)

    async def ask(system: str, prompt: str) -> str:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": prompt},
        ]
        try:
            if isinstance(llm, LLMClient):
                turn = await llm.complete(messages, model=model, kind="recall")
            else:
                turn = await llm.complete(messages)
        except LLMError as exc:  # worded for the tool's result and /memory ask alike
            raise RecallModelFailed(f"I could not ask my recall model: {exc.reason}") from exc
        return str(turn.content or "")

    r = settings.recall
    return Recaller(ask, Bounds(r.max_tokens, r.timeout_s, r.max_rounds))
