"""Make docs/chat.png, the README's picture of a conversation: the real bot (lcm memory,
SQLite) against the test suite's fake Bot API and fake OpenAI server, with a scripted
model that looks its answer up with the memory tool. What the bot sent (text and
entities, the message each reply quotes) is drawn as a Telegram-like page and
photographed with headless Chromium.

    PYTHONPATH=. .venv/bin/python docs/tools/make_chat_screenshot.py [--out docs/chat.png]

Only the model's words are scripted; everything else in the picture (the numbered
source, the quoted message, the /new and /memory why replies) is the bot's own output.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fakes.openai_server import FakeOpenAI, Response, text, tool_call
from tests.fakes.telegram_server import BotMessage, FakeTelegram
from tests.reliability.conftest import ask
from tests.reliability.harness import live_bot

ROOT = Path(__file__).resolve().parents[2]
USER_ID = 42
CHROMIUM = "/usr/bin/chromium"
WIDTH = 460

# The user's side of the conversation, and the model's answers to its plain messages.
PLANTED = "We adopted a beagle puppy today! Her name is Biscuit."
QUESTION = "What was the name of the puppy we adopted?"
REPLIES = {
    PLANTED: "Congratulations! Biscuit is a lovely name for a beagle. How is she settling in?",
}


def model(body: dict[str, Any]) -> Response:
    """The scripted model: small talk from REPLIES; the question makes it search its
    memory, and the answer cites the hits that hold the answer (the message that told it
    the name), as the system prompt asks a real model to."""
    msgs = body.get("messages") or []
    last = msgs[-1] if msgs else {}
    if last.get("role") == "tool":
        found = str(last.get("content") or "")
        ids = re.findall(r"^\[message (\d+)\].*\n .*Her name is Biscuit", found, re.M)
        cites = "".join(f" [{i}]" for i in ids)
        return text(f"Her name is **Biscuit**, the beagle you adopted{cites}.")
    content = str(last.get("content") or "")
    if content == QUESTION:
        return tool_call("memory", {"action": "search", "text": "puppy adopted name"})
    return text(REPLIES.get(content, "OK."))


@dataclass
class Bubble:
    outgoing: bool  # sent by the user
    message_id: int
    text: str
    entities: list[dict[str, Any]]
    reply_to: int | None = None


async def converse(workdir: Path) -> list[Bubble]:
    async with FakeTelegram() as tg, FakeOpenAI(model) as llm:
        async with live_bot(workdir, tg, llm, provider="lcm"):
            chat = tg.private(USER_ID, "Ann")
            for line in (PLANTED, "/new", QUESTION, "/memory why"):
                await ask(tg, chat, line)
        sent: list[Bubble] = []
        # The fake server keeps every message of the chat; the user's are the ones not from the bot.
        for (chat_id, message_id), msg in sorted(tg._messages.items()):
            if chat_id == USER_ID and "text" in msg and not msg.get("from", {}).get("is_bot"):
                sent.append(Bubble(True, message_id, msg["text"], msg.get("entities", [])))
        got = [_bubble(m) for m in tg.bot_messages(USER_ID)]
    return sorted(sent + got, key=lambda b: b.message_id)


def _bubble(m: BotMessage) -> Bubble:
    return Bubble(False, m.message_id, m.text, m.entities, m.reply_to)


# --- drawing -------------------------------------------------------------------------

_TAGS = {
    "bold": ("<b>", "</b>"),
    "italic": ("<i>", "</i>"),
    "underline": ("<u>", "</u>"),
    "strikethrough": ("<s>", "</s>"),
    "code": ("<code>", "</code>"),
    "pre": ("<pre>", "</pre>"),
    "blockquote": ("<blockquote>", "</blockquote>"),
    "url": ('<a class="link">', "</a>"),
    "text_link": ('<a class="link">', "</a>"),
    "bot_command": ('<a class="link">', "</a>"),
}


def render_entities(text_: str, entities: list[dict[str, Any]]) -> str:
    """Telegram's entities (UTF-16 offsets) as HTML, nested as Telegram nests them."""
    units = text_.encode("utf-16-le", "surrogatepass")
    opens: dict[int, list[str]] = {}
    closes: dict[int, list[str]] = {}
    for e in sorted(entities, key=lambda e: (e["offset"], -e["length"])):
        tag = _TAGS.get(e["type"])
        if tag:
            opens.setdefault(e["offset"], []).append(tag[0])
            closes.setdefault(e["offset"] + e["length"], []).insert(0, tag[1])
    # Cut the text only where an entity starts or ends (never inside a surrogate pair).
    cuts = sorted({0, len(units) // 2, *opens, *closes})
    out: list[str] = []
    for at, nxt in zip(cuts, [*cuts[1:], None], strict=True):
        out.extend(closes.get(at, []))
        out.extend(opens.get(at, []))
        if nxt is not None:
            out.append(html.escape(units[2 * at : 2 * nxt].decode("utf-16-le"), quote=False))
    return "".join(out).replace("\n", "<br>")


def page(bubbles: list[Bubble]) -> str:
    by_id = {b.message_id: b for b in bubbles}
    rows = []
    for b in bubbles:
        quote = ""
        if b.reply_to in by_id:
            quoted = by_id[b.reply_to]
            who = "Ann" if quoted.outgoing else "mnemo"
            first = html.escape(quoted.text.splitlines()[0][:60])
            quote = f'<div class="quote"><div class="who">{who}</div>{first}</div>'
        side = "out" if b.outgoing else "in"
        body = render_entities(b.text, b.entities)
        rows.append(f'<div class="row {side}"><div class="bubble">{quote}{body}</div></div>')
    return _PAGE.replace("{rows}", "\n".join(rows))


_PAGE = """<!doctype html><meta charset="utf-8"><style>
body { margin: 0; background: #99ba92; font: 15px/1.35 "DejaVu Sans", sans-serif;
  width: {width}px; }
header { background: #517da2; color: #fff; padding: 10px 14px; font-weight: bold; }
header small { display: block; font-weight: normal; opacity: .8; font-size: 12px; }
main { padding: 8px 10px 10px; }
.row { display: flex; margin: 5px 0; }
.row.out { justify-content: flex-end; }
.bubble { max-width: 80%; padding: 6px 10px; border-radius: 12px; background: #fff;
  box-shadow: 0 1px 1px rgba(0,0,0,.15); overflow-wrap: anywhere; }
.out .bubble { background: #effdde; }
.quote { border-left: 3px solid #4a8fd6; padding: 1px 6px; margin-bottom: 4px;
  background: rgba(74,143,214,.08); border-radius: 3px; font-size: 13px; }
.quote .who { color: #4a8fd6; font-weight: bold; }
.link { color: #2a7ab5; }
code, pre { font-family: "DejaVu Sans Mono", monospace; font-size: 13px; }
</style>
<header>mnemo<small>bot</small></header>
<main>
{rows}
</main>""".replace("{width}", str(WIDTH))


def screenshot(markup: str, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "chat.html"
        src.write_text(markup, encoding="utf-8")
        height = _content_height(src, tmp)
        subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={tmp}/profile",
                f"--screenshot={out}",
                f"--window-size={WIDTH},{height}",
                src.as_uri(),
            ],
            check=True,
            capture_output=True,
        )


def _content_height(src: Path, tmp: str) -> int:
    """The page's height, read back from Chromium's own layout (--dump-dom after a script
    writes it into the document), so the picture ends where the chat does."""
    probe = Path(tmp) / "probe.html"
    probe.write_text(
        src.read_text(encoding="utf-8")
        + "<script>document.title = document.body.scrollHeight</script>",
        encoding="utf-8",
    )
    dom = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={tmp}/profile",
            f"--window-size={WIDTH},400",
            "--dump-dom",
            probe.as_uri(),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found = re.search(r"<title>(\d+)</title>", dom)
    return int(found.group(1)) if found else 800


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "chat.png")
    parser.add_argument("--html", type=Path, help="also write the page here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bubbles = asyncio.run(converse(Path(tmp)))
    markup = page(bubbles)
    if args.html:
        args.html.write_text(markup, encoding="utf-8")
    screenshot(markup, args.out.resolve())
    print(f"{args.out}: {args.out.stat().st_size} bytes, {len(bubbles)} messages")


if __name__ == "__main__":
    main()
