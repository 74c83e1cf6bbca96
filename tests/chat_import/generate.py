"""Generated exports of any size, written as a stream (the crash test, bench/import_bench.py).

A Telegram account export of `chats` chats sharing `messages` messages: every tenth a
reply, every 25th a photo with a caption, every 50th a service message (skipped by the
import, so not counted in `expected`)."""

from __future__ import annotations

import json
from pathlib import Path

WORDS = tuple(
    [
        "climbing",
        "trip",
        "lemon",
        "tart",
        "sourdough",
        "rye",
        "starter",
        "forecast",
        "boulder",
        "dinner",
        "book",
        "club",
        "train",
        "ticket",
        "museum",
        "garden",
        "tomato",
        "bicycle",
        "repair",
        "invoice",
        "holiday",
        "lake",
        "swim",
    ]
)
T0 = 1_600_000_000


def telegram_export(path: Path, messages: int, chats: int = 1) -> int:
    """Write the export; returns how many messages an import stores from it."""
    expected = 0
    per_chat = max(1, messages // chats)
    with path.open("w", encoding="utf-8") as out:
        out.write('{"about": "generated", "chats": {"about": "", "list": [')
        written = 0
        for c in range(chats):
            count = per_chat if c < chats - 1 else messages - written
            out.write("," if c else "")
            out.write(f'{{"name": "Chat {c}", "type": "private_group", "id": {1000 + c}, ')
            out.write('"messages": [')
            for i in range(count):
                msg: dict[str, object] = {
                    "id": i + 1,
                    "type": "message",
                    "date": "2020-09-13T12:26:40",
                    "date_unixtime": str(T0 + written + i),
                    "from": f"Person {i % 7}",
                    "from_id": f"user{i % 7}",
                    "text": " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(12))
                    + f" #{c}.{i}",
                }
                if i % 50 == 49:
                    msg = {**msg, "type": "service", "action": "pin_message", "text": ""}
                else:
                    expected += 1
                if i % 10 == 9:
                    msg["reply_to_message_id"] = i
                if i % 25 == 24:
                    msg["photo"] = f"photos/photo_{i}.jpg"
                out.write(("," if i else "") + json.dumps(msg, ensure_ascii=False))
            out.write("]}")
            written += count
        out.write("]}}")
    return expected
