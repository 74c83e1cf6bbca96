"""Telegram's rendering of an answer: Markdown to Telegram HTML, split to its limits,
streamed by editing one message."""
