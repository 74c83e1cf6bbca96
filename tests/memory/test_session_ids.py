"""Stored session ids and their generations (`memory.contract.types`): `session_id` builds the id
of generation n of a conversation, `parse_session_id` reads it back, `Session` carries
the generation. Stored ids must stay byte-identical to the ones the pool wrote before
the generation was explicit (`<base>#<n>`), so existing databases keep working: the
`legacy_*` functions below are that code, kept here as the reference."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bot.channels.telegram.sessions import Place, base_session
from bot.channels.terminal import terminal_session
from memory.contract.types import GENERATION_SEP, Session, parse_session_id, session_id

# An id that already reads as a generation: a non-empty head, '#', then a number as
# `session_id` writes it (ASCII digits, no leading zero). Written from the spec, not
# from the code under test.
_READS_AS_GENERATION = re.compile(r".#[1-9][0-9]*\Z", re.DOTALL)


def _is_base(text: str) -> bool:
    return bool(text) and not _READS_AS_GENERATION.search(text)


# '#', digits and a few other characters often, so ids near the boundary come up.
_id_text = st.text(st.one_of(st.sampled_from("#0123456789:a"), st.characters()), max_size=30)
bases = _id_text.filter(_is_base)
generations = st.integers(min_value=0, max_value=10**12)


# --- the format before this change (bot/conversation/service.py and bot/conversation/commands.py) ----------------------


def legacy_with_generation(base: Session, generation: int) -> Session:
    if generation == 0:
        return base
    return dataclasses.replace(base, id=f"{base.id}#{generation}")


def legacy_generation_of(base_id: str, sid: str) -> int | None:
    if sid == base_id:
        return 0
    prefix = base_id + "#"
    if sid.startswith(prefix) and sid[len(prefix) :].isdigit():
        return int(sid[len(prefix) :])
    return None


def legacy_base_of(session: Session) -> Session:
    head, sep, tail = session.id.rpartition("#")
    if sep and head and tail.isdigit():
        return dataclasses.replace(session, id=head)
    return session


# --- round trips -------------------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(bases, generations)
def test_any_base_and_generation_survive_build_then_parse(base: str, generation: int):
    stored = session_id(base, generation)
    assert parse_session_id(stored) == (base, generation)
    session = Session(id=stored, agent_id="a", user_id=7, channel="c")
    assert (session.generation, session.base_id) == (generation, base)
    assert session.base() == Session(id=base, agent_id="a", user_id=7, channel="c")
    assert session.base().at_generation(generation) == session


@settings(max_examples=500, deadline=None)
@given(_id_text)
@example("a#05")
@example("a#0")
@example("a#٣")
@example("a#1#2")
@example("#1")
@example("")
def test_parsing_any_stored_id_loses_nothing(stored: str):
    """Whatever a database holds reads back as a (base, generation) that builds the
    same bytes again."""
    base, generation = parse_session_id(stored)
    assert generation >= 0
    assert session_id(base, generation) == stored
    assert Session(id=stored).generation == generation


@settings(max_examples=500, deadline=None)
@given(_id_text, generations)
def test_building_refuses_exactly_the_ids_that_would_not_read_back(base: str, generation: int):
    unreadable = (not _is_base(base) and base != "") if generation == 0 else base == ""
    try:
        stored = session_id(base, generation)
    except ValueError:
        assert unreadable
    else:
        assert not unreadable and parse_session_id(stored) == (base, generation)


@settings(max_examples=500, deadline=None)
@given(bases.filter(lambda b: legacy_base_of(Session(b)).id == b), generations)
def test_ids_in_the_old_format_build_and_parse_the_same(base: str, generation: int):
    """Every base the old code could rotate (it read `chat#0` as generation 0 of `chat`:
    no channel builds such a base)."""
    old = legacy_with_generation(Session(id=base, user_id=3), generation)
    assert session_id(base, generation) == old.id  # byte-identical stored ids
    assert Session(id=base, user_id=3).at_generation(generation) == old
    assert parse_session_id(old.id) == (base, generation)
    assert legacy_generation_of(base, old.id) == generation
    assert legacy_base_of(old).id == Session(id=old.id).base_id
    assert Session(id=old.id).generation == generation


@settings(max_examples=200, deadline=None)
@given(
    agent_id=st.text(min_size=1, max_size=20).filter(str.isprintable),
    user_id=st.integers(min_value=-(10**13), max_value=10**13),
    thread=st.none() | st.integers(min_value=1, max_value=10**9),
    generation=generations,
)
def test_channel_base_ids_round_trip(
    agent_id: str, user_id: int, thread: int | None, generation: int
):
    """The bases the channels build (any agent id, a '#' in it included) are bases."""
    for base in (
        base_session(agent_id, Place(user_id, None, False), user_id),
        base_session(agent_id, Place(user_id, thread, True), 5),
        terminal_session(agent_id, "work"),
    ):
        assert base.generation == 0 and base.base() == base
        live = base.at_generation(generation)
        assert live == legacy_with_generation(base, generation)
        assert (live.generation, live.base()) == (generation, base)


def test_known_ids():
    assert GENERATION_SEP == "#"  # in every stored id: another one orphans rotated sessions
    assert parse_session_id("default:telegram:42#3") == ("default:telegram:42", 3)
    assert parse_session_id("default:telegram:42") == ("default:telegram:42", 0)
    # Not written by `session_id`: whole base ids, generation 0.
    for odd in ("a#", "#5", "a#05", "a#0", "a#-1", "a#x", "a#\u0663", "a#\u00b2"):
        assert parse_session_id(odd) == (odd, 0)
    assert parse_session_id("a#1#2") == ("a#1", 2)


@pytest.mark.parametrize(("base", "generation"), [("", 1), ("chat#2", 0), ("chat", -1)])
def test_ids_that_would_not_read_back_are_refused(base: str, generation: int):
    with pytest.raises(ValueError, match="session"):
        session_id(base, generation)


def test_the_generation_is_not_part_of_equality_or_repr():
    """As before it existed: sessions compare, hash and print by their fields."""
    session = Session(id="s#2", user_id=1)
    assert session == Session("s#2", "default", 1, "cli") and session.generation == 2
    assert hash(session) == hash(Session("s#2", "default", 1, "cli"))
    assert repr(session) == "Session(id='s#2', agent_id='default', user_id=1, channel='cli')"
    with pytest.raises(TypeError):
        Session(id="s", generation=2)  # type: ignore[call-arg]  # follows from the id
