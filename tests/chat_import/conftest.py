"""The fake servers of the Telegram tests, for the in-chat import."""

from tests.telegram.conftest import llm, tg

__all__ = ["llm", "tg"]
