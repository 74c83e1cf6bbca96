"""What people read of an import: the plan (dry run) and the outcome, the same words
in the operator's terminal and in the chat."""

from __future__ import annotations

from datetime import datetime

from bot.chat_import.importer import ChatPlan, Plan, Report

FORMAT_NAMES = {"telegram": "Telegram export", "chatgpt": "ChatGPT export"}


def _day(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d") if value is not None else "?"


def _span(first: datetime | None, last: datetime | None) -> str:
    return f"{_day(first)} .. {_day(last)}" if first is not None else "no dates"


def _chat_line(c: ChatPlan) -> str:
    state = (
        "changed since it was imported (edited or regenerated): left as imported"
        if c.changed
        else f"{c.new} new"
        if c.new
        else "already imported"
    )
    return f"• {c.chat.title}: {c.messages} messages, {_span(c.first, c.last)}, {state}"


def plan_lines(p: Plan, *, max_chats: int = 20) -> list[str]:
    head = (
        f"{FORMAT_NAMES[p.format.name]} {p.path.name}: {len(p.chats)} "
        f"{'chat' if len(p.chats) == 1 else 'chats'}, {p.messages} messages "
        f"({_span(p.first, p.last)})"
    )
    if p.others:
        head += f"; {p.others} other chats in the file left out"
    lines = [head]
    lines += [_chat_line(c) for c in p.chats[:max_chats]]
    if len(p.chats) > max_chats:
        lines.append(f"… and {len(p.chats) - max_chats} more chats")
    if p.new:
        lines.append(
            f"New: {p.new} messages, about {p.new_tokens} tokens, each chat kept as an "
            "archived conversation (searchable; never your current chat's context)."
        )
    else:
        lines.append("Nothing new: everything in it is imported already.")
    return lines


def report_line(report: Report, seconds: float) -> str:
    rate = f", {report.messages / seconds:.0f} messages/s" if seconds > 0 else ""
    return (
        f"Imported {report.messages} messages into {len(report.sessions)} archived "
        f"conversations in {seconds:.1f} s{rate}."
    )
