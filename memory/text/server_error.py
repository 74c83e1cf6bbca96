"""What a model server said when it refused: the message of its error body, as one
short line an operator can act on ("Conversation roles must alternate", "Pooling type
'none' is not OAI compatible"), with the caller's secrets masked (a body may echo the
key or the prompt, so it is also cut short)."""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
LIMIT = 200  # characters: enough for a server's reason, too few for a whole prompt
# A 5xx that will fail the same way on every retry: the server cannot do this request.
_NOT_SUPPORTED = re.compile(
    r"not supported|unsupported|does not support|not compatible|not implemented", re.I
)
_SPACE = re.compile(r"\s+")


def server_message(exc: BaseException, secrets: tuple[str, ...] = ()) -> str:
    """The message of `exc`'s error body (an openai `APIStatusError` or stream error),
    one line of at most LIMIT characters with `secrets` masked; "" when it has none."""
    text = _message_of(getattr(exc, "body", None))
    if not text:
        return ""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, MASK)
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= LIMIT else text[: LIMIT - 1] + "…"


def not_supported(message: str) -> bool:
    """The server says it cannot do this kind of request at all (no point retrying)."""
    return bool(_NOT_SUPPORTED.search(message))


def _message_of(body: Any, depth: int = 0) -> str:
    # OpenAI and llama.cpp: {"error": {"message": ...}} (openai hands over the inner
    # object); vLLM: {"message": ...}; FastAPI-style servers: {"detail": ...}.
    if isinstance(body, str):
        return body
    if isinstance(body, dict) and depth < 3:
        for key in ("message", "detail", "error"):
            found = _message_of(body.get(key), depth + 1)
            if found:
                return found
    return ""
