"""Summarizer: prompts, three-tier escalation, deterministic truncation, errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.compaction.summarizer import (
    HANDOFF_SECTIONS,
    LLMSummarizer,
    StaticSummarizer,
    SummarizerError,
    TruncatingSummarizer,
    build_prompt,
    condensed_target,
    leaf_target,
    truncate_to_tokens,
)
from memory.contract.types import SummarizeOptions
from memory.text.tokens import estimate_tokens

SOURCE = "The user said they live in Lisbon and prefer tea over coffee. " * 20  # 315 tokens


class Scripted:
    """A `generate` that answers from a script and records the prompts it saw."""

    def __init__(self, *answers: str | Exception) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    async def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def words(n_tokens: int) -> str:
    """Text of at least `n_tokens` tokens (a sentence more at most), of short sentences."""
    sentence = "Fact number one is kept. "
    out = sentence
    while estimate_tokens(out) < n_tokens:
        out += sentence
    return out.strip()


# --- targets and prompts ------------------------------------------------------------


def test_targets() -> None:
    assert leaf_target(300) == 100
    assert condensed_target(300) == 150
    assert leaf_target(0) == 1 and condensed_target(1) == 1


def test_prompt_wording_follows_options() -> None:
    leaf = build_prompt("hello", SummarizeOptions(target_tokens=50))
    condensed = build_prompt("hello", SummarizeOptions(is_condensed=True, depth=1))
    aggressive = build_prompt("hello", SummarizeOptions(aggressive=True, target_tokens=50))
    assert "<conversation>\nhello\n</conversation>" in leaf
    assert "<summaries>\nhello\n</summaries>" in condensed
    assert "depth 2" in condensed
    assert "about 50 tokens" in leaf and "at most 50 tokens" in aggressive
    assert "aggressive" in aggressive.lower() and "aggressive" not in leaf.lower()
    assert "previous_summary" not in leaf


def test_prompt_carries_previous_summary() -> None:
    prompt = build_prompt("new part", SummarizeOptions(previous="The user is Ana."))
    assert "<previous_summary>\nThe user is Ana.\n</previous_summary>" in prompt
    assert prompt.index("previous_summary") < prompt.index("new part")


def test_handoff_prompt_has_every_section_in_order() -> None:
    prompt = build_prompt("talk", SummarizeOptions(handoff=True, previous="old handoff"))
    positions = [prompt.index(f"## {name}") for name in HANDOFF_SECTIONS]
    assert positions == sorted(positions)
    assert [*HANDOFF_SECTIONS] == [
        "Goal",
        "Progress",
        "Key Decisions",
        "Files Changed",
        "Current State",
        "Blockers / Gotchas",
        "Next Steps",
    ]
    assert "NO access to the prior conversation" in prompt
    assert "old handoff" in prompt


# --- escalation ---------------------------------------------------------------------


async def test_normal_result_within_target_is_returned() -> None:
    gen = Scripted("  Ana lives in Lisbon and prefers tea.  ")
    out = await LLMSummarizer(gen).summarize(SOURCE, SummarizeOptions())
    assert out == "Ana lives in Lisbon and prefers tea."
    assert len(gen.prompts) == 1
    # Default leaf target: a third of the source.
    assert f"about {leaf_target(estimate_tokens(SOURCE))} tokens" in gen.prompts[0]


async def test_escalates_to_aggressive_when_over_150_percent() -> None:
    target = 20
    gen = Scripted(words(31), words(10))  # 31 > 1.5 * 20, then within
    out = await LLMSummarizer(gen).summarize(SOURCE, SummarizeOptions(target_tokens=target))
    assert out == words(10)
    assert len(gen.prompts) == 2
    assert "aggressive" not in gen.prompts[0].lower()
    assert "aggressive" in gen.prompts[1].lower()


async def test_exactly_150_percent_is_accepted() -> None:
    thirty = next(t for k in range(1, 100) if estimate_tokens(t := "a " * k) == 30)
    gen = Scripted(thirty)  # 30 tokens, target 20
    out = await LLMSummarizer(gen).summarize(SOURCE, SummarizeOptions(target_tokens=20))
    assert estimate_tokens(out) == 30 and len(gen.prompts) == 1


async def test_truncates_when_aggressive_still_too_long() -> None:
    target = 20
    gen = Scripted(words(100), words(60))
    out = await LLMSummarizer(gen).summarize(SOURCE, SummarizeOptions(target_tokens=target))
    assert len(gen.prompts) == 2
    assert estimate_tokens(out) <= target
    assert out.endswith("kept.…")  # cut after a whole sentence
    assert words(60).startswith(out.removesuffix("…"))


async def test_condensed_default_target_is_half() -> None:
    gen = Scripted("short")
    await LLMSummarizer(gen).summarize(SOURCE, SummarizeOptions(is_condensed=True))
    assert f"about {condensed_target(estimate_tokens(SOURCE))} tokens" in gen.prompts[0]


async def test_handoff_skips_length_escalation() -> None:
    long_handoff = "## Goal\n" + words(500)
    gen = Scripted(long_handoff)
    out = await LLMSummarizer(gen).summarize(
        SOURCE, SummarizeOptions(handoff=True, target_tokens=10)
    )
    assert out == long_handoff and len(gen.prompts) == 1


@pytest.mark.parametrize("opts", [SummarizeOptions(), SummarizeOptions(handoff=True)])
async def test_empty_output_is_an_error(opts: SummarizeOptions) -> None:
    with pytest.raises(SummarizerError, match="empty"):
        await LLMSummarizer(Scripted(" \n ")).summarize(SOURCE, opts)


async def test_empty_aggressive_output_is_an_error() -> None:
    gen = Scripted(words(100), "")
    with pytest.raises(SummarizerError, match="empty"):
        await LLMSummarizer(gen).summarize(SOURCE, SummarizeOptions(target_tokens=10))


async def test_generate_exception_becomes_summarizer_error_with_cause() -> None:
    boom = ConnectionError("server went away")
    with pytest.raises(SummarizerError, match="server went away") as info:
        await LLMSummarizer(Scripted(boom)).summarize(SOURCE, SummarizeOptions())
    assert info.value.__cause__ is boom


async def test_empty_source_is_an_error() -> None:
    gen = Scripted("never asked")
    with pytest.raises(SummarizerError):
        await LLMSummarizer(gen).summarize("   ", SummarizeOptions())
    assert gen.prompts == []


# --- deterministic truncation -------------------------------------------------------


def test_truncation_prefers_sentence_then_line_then_word() -> None:
    text = "First sentence here. Second one is much longer than the allowance"
    assert truncate_to_tokens(text, 7) == "First sentence here.…"
    assert truncate_to_tokens("line one\nline two goes on and on", 4) == "line one…"
    assert truncate_to_tokens("alpha beta gamma delta epsilon", 4) == "alpha beta…"
    assert truncate_to_tokens("x" * 100, 2) == "xx…"


def test_decimal_point_is_not_a_sentence_end() -> None:
    out = truncate_to_tokens("Pi is 3.14159 and that is the famous constant", 3)
    assert out == "Pi is…"


def test_short_text_is_unchanged() -> None:
    assert truncate_to_tokens("fits", 5) == "fits"
    assert truncate_to_tokens("", 5) == ""


def test_never_splits_clusters_or_surrogates() -> None:
    family = "👨\u200d👩\u200d👧"
    assert truncate_to_tokens(family * 10, 2) == family + "…"
    pair = "\ud83d\ude00"  # a surrogate pair held as two code points
    out = truncate_to_tokens(pair * 10, 1)
    assert out == pair + "…"
    accented = "e\u0301" * 20
    cut = truncate_to_tokens(accented, 2).removesuffix("…")
    assert cut and not cut.endswith("e")


@given(st.text(min_size=1, max_size=300), st.integers(min_value=0, max_value=40))
def test_truncation_invariants(text: str, target: int) -> None:
    out = truncate_to_tokens(text, target)
    assert out != ""
    core = out.removesuffix("…")
    assert core == "" or text.strip().startswith(core) or text.startswith(core)
    last = core[-1:] or "x"
    assert not 0xD800 <= ord(last) <= 0xDBFF
    if out != text and out != text.strip() and len(core) > 1:
        assert estimate_tokens(out) <= max(1, target)


# --- deterministic summarizers ------------------------------------------------------


async def test_static_summarizer_records_and_fails_on_demand() -> None:
    s = StaticSummarizer("fixed")
    opts = SummarizeOptions(depth=2)
    assert await s.summarize("abc", opts) == "fixed"
    assert s.calls == [("abc", opts)]
    s.fail = True
    with pytest.raises(SummarizerError):
        await s.summarize("abc", opts)
    s.fail = ValueError("custom")
    with pytest.raises(ValueError, match="custom"):
        await s.summarize("abc", opts)


async def test_truncating_summarizer_hits_target() -> None:
    s = TruncatingSummarizer()
    out = await s.summarize(SOURCE, SummarizeOptions())
    assert out and estimate_tokens(out) <= leaf_target(estimate_tokens(SOURCE))
    handoff = await s.summarize(SOURCE, SummarizeOptions(handoff=True, target_tokens=40))
    assert handoff.startswith("## Current State\n") and estimate_tokens(handoff) <= 40
    with pytest.raises(SummarizerError):
        await s.summarize("", SummarizeOptions())


@pytest.mark.parametrize("text", ["0🏻", "🏻", "a\u0301"])
def test_one_character_cluster_is_never_lengthened_by_the_mark(text: str) -> None:
    # Found by test_truncation_invariants: a digit with a skin-tone modifier is one
    # cluster, which a cut kept whole and then marked, longer than what it cut.
    assert truncate_to_tokens(text, 0) == text
