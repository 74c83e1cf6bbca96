"""An answer's sources as Telegram shows them (memory/provenance.py chooses them).

The answer's citations are numbered (`[1]`); its last line lists them: in a supergroup,
each number links to the original message (`memory.origins.link`); where Telegram has no
link (a private chat, a basic group, a summary or archive), the number is followed by
the date and first words. In a private chat the answer is also sent as a reply quoting
its first cited message when that message is in this chat; an answer already shown
while it streamed cannot become a reply, so its sources then follow as a message of
their own quoting the original (bot/telegram/handlers.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memory import origins
from memory.provenance import Source

_MARKUP = re.compile(r"[*_`\[\]~|>]+")  # Markdown markers a quoted message must not bring


def footer(sources: Sequence[Source]) -> str:
    """The Markdown line(s) that end an answer citing `sources` ("" for none)."""
    if not sources:
        return ""
    linked: list[str] = []
    plain: list[str] = []
    for s in sources:
        url = origins.link(s.origin)
        if url is not None:
            linked.append(f"[{s.number}]({url})")
            continue
        date = f" {s.at:%Y-%m-%d}" if s.at else ""
        words = _MARKUP.sub(" ", s.words).strip()
        what = f"“{words}”" if words else f"{s.ref.kind} {s.ref.id}"
        plain.append(f"{s.number}.{date} {what}")
    lines = [f"Sources: {' · '.join(linked)}"] if linked else []
    if plain:
        lines.append(("Sources:\n" if not linked else "") + "\n".join(plain))
    return "\n\n" + "\n".join(lines)


def quoted(sources: Sequence[Source], chat_id: int) -> int | None:
    """The message of chat `chat_id` a private answer replies to: its first cited
    message that was written in this chat and has no link."""
    for s in sources:
        if origins.link(s.origin) is None and origins.same_chat(
            s.origin, origins.TELEGRAM, chat_id
        ):
            assert s.origin is not None
            return s.origin.message_id
    return None
