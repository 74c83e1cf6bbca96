"""Images a user sent with a turn (`llm.vision`): shown to the model in that turn only.

Memory is text: the stored user message says "[photo]" (and the caption), never the
image. For the turn's model calls the current user message (the last user message of
the assembled context: the one the turn appended) goes out as content parts, its text
and one `image_url` part per image, a `data:` URL. Later turns see the stored text and
what the model answered about the image. A resumed turn (`Conversations.resume`) has no image.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memory.contract.types import Message, Role

log = logging.getLogger(__name__)

# What one image counts for in `memory.budget_tokens`: a fixed estimate, not its bytes
# (OpenAI bills a 'high detail' 1024x1024 image about 765 tokens, 2048x2048 over 1,000).
IMAGE_TOKENS = 1_000


@dataclass(frozen=True)
class Image:
    """An image's bytes and MIME type (never in a repr, so never in a log line)."""

    data: bytes = field(repr=False)
    mime: str = "image/jpeg"

    def part(self) -> dict[str, Any]:
        """The Chat Completions content part carrying the image."""
        encoded = base64.b64encode(self.data).decode("ascii")
        return {"type": "image_url", "image_url": {"url": f"data:{self.mime};base64,{encoded}"}}


def with_images(
    messages: Sequence[Message], parts: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The Chat Completions payload of `messages`, its last user message carrying
    `parts` (image parts, see `Image.part`) after its text."""
    payload = [m.to_openai() for m in messages]
    for entry in reversed(payload):
        if entry["role"] == Role.USER:
            entry["content"] = [{"type": "text", "text": entry["content"] or ""}, *parts]
            return payload
    log.warning("no user message to attach %d image(s) to: sent without them", len(parts))
    return payload
