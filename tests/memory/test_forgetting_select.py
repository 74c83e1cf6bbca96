"""What a forget selects: a text in any case and script, tool calls and their results
together, never too little text; on both databases."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from memory.contract.capabilities import ProviderContext
from memory.contract.registry import create_provider
from memory.contract.types import Message, Session, ToolCall
from memory.storage import forgetting as fg
from memory.storage.forgetting import Owner, SelectorError
from tests.fakes.summarizer import KeepingSummarizer

S = Session("tg-4", "default", 4)
OWNER = Owner(4, "default")


@pytest.fixture
async def provider(engine: AsyncEngine, tmp_path: Path):  # type: ignore[no-untyped-def]
    p = create_provider(
        "simple",
        ProviderContext(
            engine=engine,
            summarizer=KeepingSummarizer(),
            config={"store_dir": str(tmp_path / "mem")},
        ),
    )
    yield p
    await p.close()


async def test_text_is_matched_in_any_case_and_script(provider) -> None:  # type: ignore[no-untyped-def]
    await provider.append(
        S,
        Message("user", "Mein Grüße an ÜBERMORGEN"),
        Message("assistant", "noted: übermorgen"),
        Message("user", "50% of_it"),
    )
    preview = await fg.preview(provider, OWNER, "Übermorgen")
    assert [i.role for i in preview.items] == ["user", "assistant"]
    # LIKE's wildcards in the text are literal.
    assert [i.first_words for i in (await fg.preview(provider, OWNER, "0% o")).items] == [
        "50% of_it"
    ]
    assert (await fg.preview(provider, OWNER, "50_")).items == []  # "_" is no wildcard
    with pytest.raises(SelectorError):
        await fg.preview(provider, OWNER, "ab")


async def test_a_tool_call_and_its_results_go_together(provider) -> None:  # type: ignore[no-untyped-def]
    await provider.append(
        S,
        Message("user", "weather please"),
        Message(
            "assistant",
            "",
            tool_calls=[
                ToolCall("c1", "weather", '{"city": "Paris"}'),
                ToolCall("c2", "weather", '{"city": "Rome"}'),
            ],
        ),
        Message("tool", "Paris 12 Zsunny", tool_call_id="c1", name="weather"),
        Message("tool", "Rome 19", tool_call_id="c2", name="weather"),
        Message("assistant", "Paris is mild"),
    )
    # A word of one result: the call and both results.
    preview = await fg.preview(provider, OWNER, "Zsunny")
    assert [i.role for i in preview.items] == ["assistant", "tool", "tool"]
    # A word of a call's arguments (a part, not the content): the same three.
    assert (await fg.preview(provider, OWNER, '"Rome"')).ids == preview.ids
    await fg.forget(provider, OWNER, preview.ids)
    history = await provider.load_history(S.id)
    assert [m.content for m in history] == ["weather please", "Paris is mild"]
    window = await provider.assemble(S, 10**6, 10)
    assert all(not m.tool_calls and m.role != "tool" for m in window)


async def test_a_reused_call_id_pairs_each_result_with_its_own_call(provider) -> None:  # type: ignore[no-untyped-def]
    def exchange(word: str) -> list[Message]:
        return [
            Message("user", f"look up {word}"),
            Message("assistant", "", tool_calls=[ToolCall("call_0", "search", f'"{word}"')]),
            Message("tool", f"found {word}", tool_call_id="call_0", name="search"),
            Message("assistant", f"it is {word}"),
        ]

    await provider.append(S, *exchange("Zfirst"), *exchange("Zsecond"))
    preview = await fg.preview(provider, OWNER, "found Zfirst")
    assert [i.first_words for i in preview.items] == ["", "found Zfirst"]
    await fg.forget(provider, OWNER, preview.ids)
    left = [m.content for m in await provider.load_history(S.id)]
    assert left == ["look up Zfirst", "it is Zfirst", *[m.content for m in exchange("Zsecond")]]
