"""Hostile exports, small on disk (issue #32): the tests and bench/hostile_import.py."""

from __future__ import annotations


def deep_export(fmt: str, depth: int) -> bytes:
    """A one-message export ("telegram" result.json, "chatgpt" conversations.json) whose
    message text is a list nested `depth` deep: 2 bytes a level."""
    nest = "[" * depth + "]" * depth
    if fmt == "telegram":
        text = (
            '{"name": "Bob", "type": "personal_chat", "id": 1, "messages": [{"id": 1, '
            '"type": "message", "date": "2022-01-01T10:00:00", "date_unixtime": "1641031200", '
            f'"from": "Bob", "text": {nest}}}]}}'
        )
    else:
        text = (
            '[{"title": "t", "mapping": {"a": {"message": {"author": {"role": "user"}, '
            f'"content": {{"content_type": "text", "parts": {nest}}}}}, "parent": null, '
            '"children": []}}, "current_node": "a"}]'
        )
    return text.encode()


def telegram_saying(text_json: str) -> bytes:
    """A one-message result.json whose text is `text_json`, as written (raw JSON)."""
    return (
        '{"name": "Bob", "type": "personal_chat", "id": 1, "messages": [{"id": 1, '
        '"type": "message", "date": "2022-01-01T10:00:00", "date_unixtime": "1641031200", '
        f'"from": "Bob", "text": {text_json}}}]}}'
    ).encode()


def wide_conversation(nodes: int) -> bytes:
    """A conversations.json of one conversation of `nodes` empty nodes: shallow and
    small (14 bytes a node), but read whole it takes ~1 KB of memory a node."""
    mapping = ", ".join(f'"n{i}": {{}}' for i in range(nodes))
    return f'[{{"title": "wide", "mapping": {{{mapping}}}}}]'.encode()
