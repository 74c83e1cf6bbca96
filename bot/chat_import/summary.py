"""What people read of an import: the plan (dry run) and the outcome, the same words
in the operator's terminal and in the chat."""

from __future__ import annotations

from datetime import datetime

from bot.chat_import.importer import Report
from bot.chat_import.scan import ChatPlan, Plan

TITLE_CHARS = 60  # of a chat's name in a listing: 20 of them and the question fit a message
FORMAT_NAMES = {"telegram": "Telegram export", "chatgpt": "ChatGPT export"}


def _day(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d") if value is not None else "?"


def _span(first: datetime | None, last: datetime | None) -> str:
    return f"{_day(first)} .. {_day(last)}" if first is not None else "no dates"


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _chat_line(c: ChatPlan) -> str:
    state = (
        "changed since it was imported (edited or regenerated): left as imported"
        if c.changed
        else f"{c.new} new"
        if c.new
        else "already imported"
    )
    title = c.chat.title if len(c.chat.title) <= TITLE_CHARS else c.chat.title[:TITLE_CHARS] + "…"
    return f"• {title}: {_n(c.messages, 'message')}, {_span(c.first, c.last)}, {state}"


def plan_lines(p: Plan, *, max_chats: int = 20) -> list[str]:
    noun = "chat" if p.format.name == "telegram" else "conversation"
    head = (
        f"{FORMAT_NAMES[p.format.name]} {p.path.name}: {_n(len(p.chats), noun)}, "
        f"{_n(p.messages, 'message')} ({_span(p.first, p.last)})"
    )
    if p.others:
        head += f"; {_n(p.others, 'other ' + noun)} in the file left out"
    lines = [head]
    lines += [_chat_line(c) for c in p.chats[:max_chats]]
    if len(p.chats) > max_chats:
        lines.append(f"… and {len(p.chats) - max_chats} more chats")
    if p.new:
        lines.append(
            f"New: {_n(p.new, 'message')}, about {p.new_tokens} tokens, each {noun} kept as "
            "an archived conversation (searchable; never your current chat's context)."
        )
    else:
        lines.append("Nothing new: everything in it is imported already.")
    return lines


def report_line(report: Report, seconds: float) -> str:
    rate = f", {report.messages / seconds:.0f} messages/s" if seconds > 0 else ""
    return (
        f"Imported {_n(report.messages, 'message')} into "
        f"{_n(len(report.sessions), 'archived conversation')} in {seconds:.1f} s{rate}."
    )
