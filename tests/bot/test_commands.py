"""Slash commands through `handle_command`, against the reference provider."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import Field
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.conversation.commands import MAX_REPLY, command_table, handle_command
from bot.conversation.service import Conversations
from memory.actions import ACTIONS, Action, Arguments, Call, Command
from memory.actions.commands import run_memory_command
from memory.actions.tool import build_tool, run_tool, tool_actions
from memory.contract.capabilities import ProfileStore
from memory.contract.types import ChangeSource, NoteKind, Session
from tests.bot.conftest import GatedSummarizer, PoolFactory
from tests.fakes.openai_server import FakeOpenAI
from tests.memory.test_tool import Core

ALICE = Session(id="default:test:1", user_id=1, channel="test")
MALLORY = Session(id="default:test:666", user_id=666, channel="test")


@pytest.fixture
def pool(sqlite_engine: AsyncEngine, make_pool: PoolFactory) -> Conversations:
    summarizer = GatedSummarizer()
    summarizer.release.set()
    return make_pool(sqlite_engine, summarizer=summarizer)


async def cmd(
    pool: Conversations, line: str, session: Session = ALICE, *, admin: bool = False
) -> str:
    name, _, args = line.partition(" ")
    return await handle_command(pool, session, name, args, is_admin=admin)


async def test_start_help_and_unknown(pool: Conversations):
    assert "/compact" in await cmd(pool, "/start") and "/memory" in await cmd(pool, "/help")
    assert (await cmd(pool, "/help@mnemo_bot")) == await cmd(pool, "/help")
    assert (await cmd(pool, "/frobnicate")).startswith("Unknown command /frobnicate")


@pytest.mark.parametrize(
    "line, usage",
    [
        ("/memory", "/memory status"),
        ("/memory help", "/memory rollback"),
        ("/memory bogus", "/memory search <text>"),
        ("/memory search", "/memory search <text>"),
        ("/memory show", "/memory show <id>"),
        ("/memory show a b", "/memory show <id>"),
        ("/memory expand", "/memory expand <summary_id>"),
        ("/memory constrain", "/memory constrain <text>"),
        ("/memory unconstrain", "/memory unconstrain <id>"),
        ("/memory status now", "/memory status"),
        ("/memory rollback profile", "/memory rollback <profile|soul|constraint> <version>"),
        ("/memory rollback mood 1", "/memory rollback <profile|soul|constraint> <version>"),
        ("/memory rollback profile x", "/memory rollback <profile|soul|constraint> <version>"),
    ],
)
async def test_bad_arguments_answer_with_usage(pool: Conversations, line: str, usage: str):
    answer = await cmd(pool, line, admin=True)
    assert "Usage" in answer and usage in answer


async def test_status_search_show_expand_and_compact(pool: Conversations):
    for i in range(3):
        await pool.chat(ALICE, f"the {['red', 'blue', 'green'][i]} kite flies")
    status = await cmd(pool, "/memory status")
    assert "Memory provider: reference" in status and "Messages: 6" in status
    assert "You can also use: /memory search" in status and "Compactor" not in status
    found = await cmd(pool, "/memory search blue kite")
    header, group, best = found.splitlines()[:3]
    assert header.endswith("for “blue kite”:") and best.endswith(": the blue kite flies")
    assert group == "From this conversation:"
    assert (await cmd(pool, "/memory search zeppelin")) == "No matches for “zeppelin”."

    answer = await cmd(pool, "/compact")
    assert answer.startswith("Compacted 4 messages into 1 summary (1 leaf, 0 condensed)")
    assert "tokens" in answer and "Summary:\nsummary of" in answer
    assert (await cmd(pool, "/compact")).startswith("Nothing to compact")

    summary_id = await _summary_id(pool)
    shown = await cmd(pool, f"/memory show {summary_id}")
    assert shown.startswith(f"Summary {summary_id} (leaf, depth 0")
    assert "\nsummary of " in shown  # the summarizer's text follows the header
    expanded = await cmd(pool, f"/memory expand {summary_id}")
    assert "covers 4 messages" in expanded and "the red kite flies" in expanded
    assert (await cmd(pool, "/memory show sum_nope")) == "Not found."
    # Another user's session must not reach this summary, nor learn that it exists.
    assert (await cmd(pool, f"/memory show {summary_id}", MALLORY)) == "Not found."
    assert (await cmd(pool, f"/memory expand {summary_id}", MALLORY)) == "Not found."


async def _summary_id(pool: Conversations) -> str:
    """The id of the summary heading the assembled context (`<summary id="...">`)."""
    context = await pool.provider.assemble(ALICE, 10_000, 0)
    return context[0].content.split('id="', 1)[1].split('"', 1)[0]


async def test_constraints_are_user_writes_that_the_session_sees(
    pool: Conversations, llm_server: FakeOpenAI
):
    await pool.chat(ALICE, "hello")  # freezes the session's snapshot
    assert "no rules" in await cmd(pool, "/memory constraints")
    added = await cmd(pool, "/memory constrain Always answer in French.")
    assert added.startswith("Rule added [") and added.endswith("Always answer in French.")
    rule_id = added.split("[", 1)[1].split("]", 1)[0]
    assert f"[{rule_id}] Always answer in French." in await cmd(pool, "/memory constraints")
    [entry] = await pool.provider.read_changelog(1, "default", "constraint")
    assert entry.source == ChangeSource.USER and entry.session_id == ALICE.id
    await pool.chat(ALICE, "bonjour")  # the snapshot advanced: the rule is in the prompt
    assert "Always answer in French." in llm_server.requests[-1]["messages"][0]["content"]
    assert "No rule with id 'zz'" in await cmd(pool, "/memory unconstrain zz")
    assert (await cmd(pool, f"/memory unconstrain {rule_id}")) == f"Rule {rule_id} removed."
    assert "no rules" in await cmd(pool, "/memory constraints")
    await cmd(pool, "/memory constrain Keep answers short.")
    history = (await cmd(pool, "/memory history")).splitlines()
    # Newest first, each line saying which rule came or went (not the stored JSON list).
    assert history[1].endswith("constraint create by user v2→v3: added “Keep answers short.”")
    assert history[2].endswith(
        "constraint delete by user v1→v2: removed “Always answer in French.”"
    )
    assert history[3].endswith("constraint create by user v0→v1: added “Always answer in French.”")


async def test_profile_soul_and_operator_only_rollback(pool: Conversations):
    assert (await cmd(pool, "/memory profile")) == "I have no profile of you yet."
    assert "default personality" in await cmd(pool, "/memory soul")
    await pool.provider.set_profile(1, "default", "Alice, likes tea.")
    await pool.provider.set_profile(1, "default", "Alice, likes coffee.")
    await pool.provider.set_soul(1, "default", "Calm and precise.")
    assert (await cmd(pool, "/memory profile")) == "Your profile:\nAlice, likes coffee."
    assert (await cmd(pool, "/memory soul")) == "My soul:\nCalm and precise."
    refused = await cmd(pool, "/memory rollback profile 1")
    assert "operators only" in refused
    assert (await pool.provider.get_profile(1, "default")) == "Alice, likes coffee."
    done = await cmd(pool, "/memory rollback profile 1", admin=True)
    assert done == "Restored the profile as it was at version 1 (now version 4)."
    assert (await pool.provider.get_profile(1, "default")) == "Alice, likes tea."
    assert "version must be" in (await cmd(pool, "/memory rollback profile 0", admin=True))


async def test_notes(pool: Conversations):
    assert (await cmd(pool, "/memory notes")) == "No notes or archives yet."
    await pool.provider.note_add(ALICE, "groceries", "milk, eggs")
    await pool.provider.note_alias(ALICE, "groceries", "shopping")
    await pool.provider.note_add(ALICE, "trip", "Lisbon in May", NoteKind.ARCHIVE)
    listing = await cmd(pool, "/memory notes")
    assert "Note groceries (also: shopping): milk, eggs" in listing
    assert "Archive trip: Lisbon in May" in listing
    assert (await cmd(pool, "/memory notes shopping")).endswith(":\nmilk, eggs")
    assert (await cmd(pool, "/memory notes nothing")).startswith("No note or archive is named")
    assert (await cmd(pool, "/memory notes", MALLORY)) == "No notes or archives yet."


async def test_missing_capabilities_are_named(sqlite_engine: AsyncEngine, make_pool: PoolFactory):
    bare = make_pool(sqlite_engine, compactor=False, notes=False)
    assert (await cmd(bare, "/compact")) == (
        "The reference memory provider does not compact conversations."
    )
    assert "does not support summaries" in await cmd(bare, "/memory show sum_1")
    assert "does not support notes" in await cmd(bare, "/memory notes")


async def test_long_listings_fit_one_message(pool: Conversations):
    for i in range(60):
        await pool.provider.add_constraint(1, "default", f"rule {i}: " + "x" * 90)
    listing = await cmd(pool, "/memory constraints")
    assert len(listing) <= MAX_REPLY
    assert listing.splitlines()[-1].endswith("more not shown")


async def test_new_rotates_the_session(pool: Conversations):
    await pool.chat(ALICE, "first")
    answer = await cmd(pool, "/new")
    assert answer.startswith("Started a new conversation")
    live = await pool.current_session(ALICE)
    assert live.id == ALICE.id + "#1"
    assert "Messages: 0" in await cmd(pool, "/memory status")
    # A channel may pass the live session instead of the base: same rotation.
    await cmd(pool, "/new", live)
    assert (await pool.current_session(ALICE)).id == ALICE.id + "#2"


# --- the registry: one declaration is a new action everywhere ------------------------


class ShoutArgs(Arguments):
    word: str = Field(max_length=40, description="the word to shout")


async def _shout(call: Call, args: ShoutArgs) -> str:
    profile = await call.provider.get_profile(*call.owner)
    return f"{args.word.upper()}! (your profile has {len(profile)} characters)"


SHOUT = Action(
    "shout",
    ShoutArgs,
    ProfileStore,
    "say a word loudly",
    _shout,
    command=Command(
        "shout",
        "<word> — say a word loudly",
        parse=lambda words: {"word": words} if words else None,
    ),
)


@pytest.fixture
def shout() -> Iterator[None]:
    ACTIONS.declare(SHOUT)  # what a new action's module does, once
    yield
    ACTIONS.withdraw("shout")


async def test_a_new_action_is_one_declaration(pool: Conversations, shout: None):
    await pool.provider.set_profile(1, "default", "Alice")
    # The model's tool: offered, described, its parameter's schema from its arguments.
    function = build_tool(pool.provider)["function"]
    assert "shout" in function["parameters"]["properties"]["action"]["enum"]
    assert function["parameters"]["properties"]["word"] == {
        "type": "string",
        "description": "the word to shout",
        "maxLength": 40,
    }
    assert "- shout(word): say a word loudly" in function["description"]
    said = await run_tool(pool.provider, ALICE, {"action": "shout", "word": "hello"})
    assert said == "HELLO! (your profile has 5 characters)"
    assert await run_tool(pool.provider, ALICE, {"action": "shout"}) == "error: shout needs word"
    assert (await run_tool(pool.provider, ALICE, {"action": "shout", "word": "x" * 41})).startswith(
        "error: word: String should have at most 40 characters"
    )
    # People's /memory: dispatched, listed in the usage, in the command table.
    assert await cmd(pool, "/memory shout hello") == "HELLO! (your profile has 5 characters)"
    assert await cmd(pool, "/memory shout") == "Usage: /memory shout <word> — say a word loudly"
    assert "/memory shout <word> — say a word loudly" in await cmd(pool, "/memory help")
    assert "| `/memory shout <word>` | say a word loudly |" in command_table()


async def test_a_new_action_needs_its_capability(shout: None):
    core = Core()  # no ProfileStore
    assert "shout" not in tool_actions(core)
    assert await run_tool(core, ALICE, {"action": "shout", "word": "hi"}) == (
        "error: action shout is not supported by this memory provider"
    )
    assert await run_memory_command(core, ALICE, "shout hi", is_admin=False) == (
        "The core memory provider does not support /memory shout."
    )


def test_readme_command_table_is_the_registry_s():
    doc = (Path(__file__).parents[2] / "docs" / "CHAT.md").read_text(encoding="utf-8")
    assert command_table() in doc
