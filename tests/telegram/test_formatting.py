"""Markdown -> Telegram entities: the text Telegram shows is what the model wrote minus
the Markdown markers (`bot.channels.telegram.render.markdown` defines them), never less."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.channels.telegram.render.formatting import render
from bot.channels.telegram.render.markdown import render_markdown
from bot.channels.telegram.render.splitting import utf16_len
from bot.channels.telegram.sessions import strip_mention
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.telegram_server import FakeTelegram
from tests.telegram.harness import running_bot

# What a removed marker may look like, written from the module's docstring (not from
# its code): emphasis delimiters, backtick runs, link brackets with their URL, heading
# and quote prefixes, whole fence lines.
MARKER = re.compile(
    r"\*\*|\*|~~|`+|\[|\]\((?:https?://|tg://|mailto:)[^\s()]+\)"
    r"| {0,3}#{1,6}[ \t]+| {0,3}> ?| {0,3}(?:`{3,}|~{3,})[^\n]*\n?"
)

# The examples of issue #15: tag-like text, arithmetic, dunder names, escapes.
LITERAL = [
    "List<String>",
    "std::vector<int>",
    "<br> tag",
    "2*3*4",
    "__init__",
    r"\.",
    "a_b_c",
    "&amp; &lt;",
    "x**2 + y**2",
    "a * b * c",
    "- item\n1. one",
    "| a | b |\n|---|---|",
    "C:\\path\\to",
    "<b>hi</b>",
    "***",
    "~~",
    "``",
]


@pytest.mark.parametrize("source", LITERAL)
def test_text_that_is_not_markup_is_shown_as_written(source: str) -> None:
    [piece] = render(source)
    assert piece.text == source
    assert piece.entities == ()


@pytest.mark.parametrize(
    ("source", "shown", "types"),
    [
        (
            "Use **care** with [links](https://example.org).",
            "Use care with links.",
            ["bold", "text_link"],
        ),
        ("a *b* ~~c~~ `d<e>`", "a b c d<e>", ["italic", "strikethrough", "code"]),
        ("# Title <T>\ntext", "Title <T>\ntext", ["bold"]),
        ("> quoted __init__\n> more", "quoted __init__\nmore", ["blockquote"]),
        (
            "```python\ndef __init__(self): ...\n```\nafter",
            "def __init__(self): ...\nafter",
            ["pre"],
        ),
        ("**bold with `code*` inside**", "bold with code* inside", ["bold", "code"]),
    ],
)
def test_markup_is_formatted_and_only_its_markers_go(
    source: str, shown: str, types: list[str]
) -> None:
    [piece] = render(source)
    assert piece.text == shown
    assert sorted(e.type for e in piece.entities) == sorted(types)
    assert piece.fallback == source  # refused formatting: the source, nothing lost


def removed(source: str, markers: list[tuple[int, int]]) -> str:
    keep, at = [], 0
    for start, end in sorted(markers):
        assert start >= at, "markers overlap"
        keep.append(source[at:start])
        at = end
    return "".join(keep) + source[at:]


@settings(max_examples=600, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            list("ab Z09_*~`[]()<>#&\\|!.:/-\n\t")
            + ["https://x.io", "**", "```", "> ", "# ", "é", "😀", "](", "~~"]
        ),
        max_size=60,
    ).map("".join)
)
def test_any_text_is_shown_minus_its_markers_never_less(source: str) -> None:
    rendered = render_markdown(source)
    # Only markers are removed, and each removed piece is marker-shaped.
    assert rendered.text == removed(source, rendered.markers)
    for start, end in rendered.markers:
        assert MARKER.fullmatch(source[start:end]), (source, source[start:end])
    for span in rendered.spans:
        assert 0 <= span.start < span.end <= len(rendered.text)
    # What Telegram is sent: the same text (or, if it would show blank, the source).
    for piece in render(source):
        size = utf16_len(piece.text)
        assert all(
            e.offset >= 0 and e.length > 0 and e.offset + e.length <= size for e in piece.entities
        )
    shown = "".join(p.text for p in render(source))
    assert shown in (rendered.text, source) or not source.strip()


WORD = st.text(
    alphabet=st.sampled_from(list("abcXYZ0189_<>&\\#|/.:;!?-+=")), min_size=1, max_size=8
).map(lambda w: "w" + w)  # never starts a block
SEGMENT = st.one_of(
    WORD.map(lambda w: (w, w)),
    WORD.map(lambda w: (f"**{w}**", w)),
    WORD.map(lambda w: (f"*{w}*", w)),
    WORD.map(lambda w: (f"~~{w}~~", w)),
    WORD.map(lambda w: (f"`{w}`", w)),
    WORD.map(lambda w: (f"[{w}](https://example.org/{len(w)})", w)),
    st.just(("2*3*4", "2*3*4")),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(SEGMENT, min_size=1, max_size=6), min_size=1, max_size=5),
    st.lists(st.sampled_from(["", "# ", "> "]), min_size=5, max_size=5),
)
def test_generated_markdown_shows_exactly_its_text(
    lines: list[list[tuple[str, str]]], prefixes: list[str]
) -> None:
    source = "\n".join(prefixes[i] + " ".join(md for md, _ in segs) for i, segs in enumerate(lines))
    shown = "\n".join(" ".join(txt for _, txt in segs) for segs in lines)
    assert "".join(p.text for p in render(source)) == shown


def test_blank_reply_renders_to_nothing() -> None:
    assert render("  \n\n ") == []


def test_markers_alone_are_sent_as_written() -> None:
    [piece] = render("```\n```")
    assert piece.text == "```\n```"


async def test_the_user_sees_every_character(
    tg: FakeTelegram, llm: FakeOpenAI, tmp_path: Path
) -> None:
    answer = (
        "Use `List<String>` or List<String>, std::vector<int>, <br> tag, "
        "2*3*4, __init__, \\. and **bold**."
    )
    llm.push(text(answer))
    async with running_bot(tg, llm, tmp_path):
        tg.private(42).send("show me")
        message = await tg.wait_for_message(42, contains="bold")
    assert message.text == (
        "Use List<String> or List<String>, std::vector<int>, <br> tag, "
        "2*3*4, __init__, \\. and bold."
    )
    assert [e["type"] for e in message.entities] == ["code", "bold"]


def test_strip_mention() -> None:
    assert strip_mention("@Mnemo_Bot what now?", "mnemo_bot") == "what now?"
    assert strip_mention("hey @mnemo_bot, and you", "mnemo_bot") == "hey , and you"
    assert strip_mention("ask @mnemo_bot_two instead", "mnemo_bot") == "ask @mnemo_bot_two instead"
    assert strip_mention("line one\n@mnemo_bot line two", "mnemo_bot") == "line one\nline two"
