"""Fixtures: the two fake servers, as tests/telegram has them."""

from tests.telegram.conftest import llm, tg

__all__ = ["llm", "tg"]
