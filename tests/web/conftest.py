"""The fake OpenAI-compatible server of the bot tests, for the console's end-to-end test."""

from tests.bot.conftest import llm_server  # noqa: F401 - the fixture, shared
