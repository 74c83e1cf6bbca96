"""The model server's context size, and the budget fitted to it.

llama.cpp (the compose file's `local-llm` profile, or any llama-server) says how many
tokens a request may hold at `GET /props` (`default_generation_settings.n_ctx`, per
slot). A budget above it fails every long conversation with the server's "context size
exceeded", so at start the bot reads it, when the server offers it, and lowers
`memory.budget_tokens` (and `compaction.max_tokens` with it) to fit, leaving a quarter
of the context for the reply and the tool results of the turn; one warning says so. A
server without the endpoint (OpenAI, most hosted APIs) changes nothing. Set the budget
yourself (`MNEMO_BUDGET_TOKENS`) to the size you want to silence the warning, or give
the model more context (`LLM_CTX_SIZE` in the compose profile). `llm.context_window`, when
set, is taken instead of asking (a hosted model's window), and the window is shown beside
the budget by `/memory status` and the console.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from bot.config.settings import Settings

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0
REPLY_SHARE = 4  # a quarter of the context stays free for the reply and tool results
MIN_BUDGET = 256  # memory.budget_tokens' own lower bound
HOSTED = ("api.openai.com",)  # known to have no /props: not asked


async def server_context(base_url: str) -> int | None:
    """The context size a llama.cpp server reports, or None (no such endpoint, any
    error: this is a convenience, never a reason not to start)."""
    url = httpx.URL(base_url)
    if url.host in HOSTED:
        return None
    path = url.path.rstrip("/").removesuffix("/v1")
    try:
        async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as client:
            response = await client.get(url.copy_with(path=f"{path}/props"))
        if response.status_code != 200:
            return None
        body: Any = response.json()
    except (httpx.HTTPError, ValueError):
        return None
    settings = body.get("default_generation_settings") if isinstance(body, dict) else None
    n_ctx = (settings or {}).get("n_ctx", body.get("n_ctx") if isinstance(body, dict) else None)
    return n_ctx if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) and n_ctx > 0 else None


def fit_budget(settings: Settings, n_ctx: int) -> bool:
    """Lower the budget (and the auto-compaction threshold) to fit `n_ctx`; whether it
    changed anything."""
    fitted = max(MIN_BUDGET, n_ctx - n_ctx // REPLY_SHARE)
    memory, compaction = settings.memory, settings.compaction
    if memory.budget_tokens <= fitted:
        return False
    log.warning(
        "the model server's context is %d tokens: memory.budget_tokens %d lowered to %d "
        "(and compaction.max_tokens to three quarters of that), leaving room for the reply; set "
        "MNEMO_BUDGET_TOKENS (memory.budget_tokens) to %d or less, or give the server a "
        "larger context (LLM_CTX_SIZE)",
        n_ctx,
        memory.budget_tokens,
        fitted,
        fitted,
    )
    memory.budget_tokens = fitted
    # Compaction must start below the budget by about a turn, or the budget cuts the
    # context's start every turn and the server's prompt cache never hits (docs/CHAT.md
    # "Compaction and caching"): keep about the defaults' ratio (10,000 of 13,500).
    threshold = fitted - fitted // REPLY_SHARE
    if compaction.max_tokens > threshold:
        compaction.max_tokens = threshold
    return True


async def fit_to_server(settings: Settings) -> None:
    # The operator's own figure (`llm.context_window`) wins over what the server says.
    n_ctx = settings.llm.context_window or await server_context(settings.llm.base_url)
    if n_ctx:
        settings.llm.context_window = n_ctx
        fit_budget(settings, n_ctx)
