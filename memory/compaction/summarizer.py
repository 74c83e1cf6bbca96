"""Summarizers: the LLM one with three-tier escalation, and two deterministic ones.

Escalation (seed "Summarization escalation"): ask for a normal summary; when it comes back
over 150% of the target, ask again aggressively; when that is still over 150%, truncate it
deterministically at a sentence or line boundary. Leaf summaries target a third of their
source, condensed ones half (they compress summaries already, so they keep more).

Handoff summaries (the simple provider's structured compaction) skip the length escalation:
their structure matters more than their size, and the caller keeps only one of them.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from memory.contract.types import SummarizeOptions
from memory.text.tokens import estimate_tokens, estimate_uncached

log = logging.getLogger(__name__)

Generate = Callable[[str], Awaitable[str]]

# A result over this fraction of its target triggers the next tier.
ESCALATION_RATIO = 1.5
HANDOFF_SECTIONS = (
    "Goal",
    "Progress",
    "Key Decisions",
    "Files Changed",
    "Current State",
    "Blockers / Gotchas",
    "Next Steps",
)
TRUNCATION_MARK = "…"


class SummarizerError(RuntimeError):
    """The summarizer produced nothing usable; the caller must leave its data untouched."""


def leaf_target(source_tokens: int) -> int:
    """Target size of a leaf summary: a third of its source messages (at least 1)."""
    return max(1, source_tokens // 3)


def condensed_target(source_tokens: int) -> int:
    """Target size of a condensed summary: half of its source summaries (at least 1)."""
    return max(1, source_tokens // 2)


def target_for(text: str, opts: SummarizeOptions) -> int:
    """`opts.target_tokens` when given, else the leaf or condensed default for `text`."""
    if opts.target_tokens > 0:
        return opts.target_tokens
    tokens = estimate_tokens(text)
    return condensed_target(tokens) if opts.is_condensed else leaf_target(tokens)


def over_target(text: str, target: int) -> bool:
    return estimate_tokens(text) > target * ESCALATION_RATIO


# --- prompts ------------------------------------------------------------------------

_LEAF_INTRO = (
    "You are compacting the oldest part of a conversation between a user and an AI "
    "assistant so that it can leave the assistant's context window. The assistant will "
    "later read your summary instead of these messages, and can search the originals."
)
_CONDENSED_INTRO = (
    "You are condensing several summaries of consecutive parts of one conversation "
    "(oldest first) into a single summary of the whole span (it will sit at depth {depth} "
    "of the summary tree). The assistant will read your summary instead of them."
)
_NORMAL_RULES = (
    "Preserve: decisions and their rationale; facts the user stated about themselves, "
    "their preferences and their rules or constraints; open questions, promises and "
    "active tasks with their status; names, numbers, dates, identifiers, URLs and file "
    "paths exactly as written. Drop greetings, filler and repetition. Keep the order of "
    "events where it matters."
)
_AGGRESSIVE_RULES = (
    "Be aggressive: keep ONLY durable facts (about the user, their preferences, rules and "
    "decisions made) and the current state of any unfinished task. Omit everything else, "
    "including how the conversation got there."
)
_FORMAT = (
    "Write in the third person ('the user', 'the assistant'), as terse prose or short "
    "bullet points, in the language of the conversation. Output only the summary: no "
    "preamble, no closing remarks."
)

_HANDOFF_INTRO = (
    "The conversation below is about to be removed from the assistant's context window. "
    "Write a handoff summary that lets the assistant (or anyone else) continue the "
    "conversation without it."
)
_HANDOFF_RULES = (
    "Guidelines: the summary must be self-contained: it will be read by someone with NO "
    "access to the prior conversation, so spell out names, paths, numbers and decisions "
    "instead of referring to 'the above' or 'as discussed'. Write 'None' under a heading "
    "that has nothing to report. Output only the summary, starting with the first heading."
)
_HANDOFF_HINTS = {
    "Goal": "the user's original objective for this conversation, and how it evolved",
    "Progress": "what was completed, and what was partially done",
    "Key Decisions": "decisions taken and their rationale",
    "Files Changed": "paths of files or documents touched, each with a line of context",
    "Current State": "what works, what does not, where things stand right now",
    "Blockers / Gotchas": "open problems, pitfalls, edge cases to remember",
    "Next Steps": "concrete, actionable next tasks, in order",
}


def build_prompt(text: str, opts: SummarizeOptions) -> str:
    """The instruction sent to the summarizing LLM, with `text` embedded at the end."""
    if opts.handoff:
        return _handoff_prompt(text, opts)
    parts = [
        _CONDENSED_INTRO.format(depth=opts.depth + 1) if opts.is_condensed else _LEAF_INTRO,
        _AGGRESSIVE_RULES if opts.aggressive else _NORMAL_RULES,
        _FORMAT,
    ]
    if opts.target_tokens > 0:
        limit = "at most" if opts.aggressive else "about"
        parts.append(
            f"Length: {limit} {opts.target_tokens} tokens "
            f"(roughly {opts.target_tokens * 3 // 4} words)."
        )
    if opts.previous.strip():
        parts.append(
            "For continuity, this is the summary of what came just before. Do not repeat "
            "it; use it only to resolve references:\n"
            f"<previous_summary>\n{opts.previous.strip()}\n</previous_summary>"
        )
    tag = "summaries" if opts.is_condensed else "conversation"
    parts.append(f"<{tag}>\n{text}\n</{tag}>")
    return "\n\n".join(parts)


def _handoff_prompt(text: str, opts: SummarizeOptions) -> str:
    headings = "\n".join(f"## {name}\n({_HANDOFF_HINTS[name]})" for name in HANDOFF_SECTIONS)
    parts = [
        _HANDOFF_INTRO,
        f"Use exactly these Markdown headings, in this order:\n\n{headings}",
        _HANDOFF_RULES,
    ]
    if opts.target_tokens > 0:
        parts.append(f"Keep it under about {opts.target_tokens} tokens.")
    if opts.previous.strip():
        parts.append(
            "The conversation was compacted before; this summary is being replaced by "
            "yours, so carry over everything in it that still matters:\n"
            f"<previous_summary>\n{opts.previous.strip()}\n</previous_summary>"
        )
    parts.append(f"<conversation>\n{text}\n</conversation>")
    return "\n\n".join(parts)


# --- deterministic truncation -------------------------------------------------------

_SENTENCE_ENDS = ".!?。！？…"


def _joins_previous(ch: str) -> bool:
    """True for code points that belong to the character before them: combining marks,
    zero-width joiners, variation selectors, emoji skin-tone modifiers, low surrogates."""
    cp = ord(ch)
    return (
        unicodedata.combining(ch) != 0
        or cp in (0x200C, 0x200D)
        or 0xFE00 <= cp <= 0xFE0F
        or 0x1F3FB <= cp <= 0x1F3FF
        or 0xDC00 <= cp <= 0xDFFF
        or 0xE0020 <= cp <= 0xE007F  # emoji tag sequences
    )


def _splits_cluster(text: str, i: int) -> bool:
    """True when cutting `text` before index `i` would split a character cluster."""
    return (
        _joins_previous(text[i]) or text[i - 1] == "\u200d" or 0xD800 <= ord(text[i - 1]) <= 0xDBFF
    )


def truncate_to_tokens(text: str, target_tokens: int) -> str:
    """Cut `text` to at most about `target_tokens` tokens, at the last sentence end or line
    break when one lies in the second half of the allowance, else at a word boundary,
    else mid-word (never inside a character cluster). A cut text ends with `…`.

    Never returns "" for non-empty input: the first character survives any target.
    """
    target_tokens = max(1, target_tokens)
    if estimate_tokens(text) <= target_tokens:
        return text
    body = text.strip() or text
    if estimate_tokens(body) <= target_tokens:
        return body
    room = _fitting_prefix(body, max(0, target_tokens - estimate_tokens(TRUNCATION_MARK)))
    cut = _boundary(body, room, room // 2)
    while 0 < cut < len(body) and _splits_cluster(body, cut):
        cut -= 1
    if cut <= 0 or not body[:cut].strip():
        cut = 1  # keep the first character cluster whatever the target
        while cut < len(body) and _splits_cluster(body, cut):
            cut += 1
        if cut >= len(body):
            return body  # one character cluster ('0🏻'): a mark would only add to it
    first = 1  # the end of the first character cluster, which is always kept
    while first < len(body) and _splits_cluster(body, first):
        first += 1
    out = body[:cut].rstrip() + TRUNCATION_MARK
    # The estimate is not strictly additive (a cut word costs more per letter): shorten
    # until it fits, keeping at least the first cluster.
    while cut > first and estimate_tokens(out) > target_tokens:
        cut -= 1
        while cut > first and _splits_cluster(body, cut):
            cut -= 1
        out = body[:cut].rstrip() + TRUNCATION_MARK
    return out


def _fitting_prefix(body: str, tokens: int) -> int:
    """The length of the longest prefix of `body` estimated at most `tokens` (a binary
    search: the estimate grows with the prefix)."""
    low, high = 0, len(body)
    while low < high:
        mid = (low + high + 1) // 2
        if estimate_uncached(body[:mid]) <= tokens:
            low = mid
        else:
            high = mid - 1
    return low


def _boundary(body: str, limit: int, floor: int) -> int:
    """End of the best cut of `body` at or before `limit`: the last line break or
    sentence end at or after `floor`, else the last space there, else `limit` itself."""
    for i in range(min(limit, len(body)) - 1, floor - 1, -1):
        ch = body[i]
        if ch == "\n":
            return i
        if ch in _SENTENCE_ENDS and (i + 1 == len(body) or body[i + 1].isspace()):
            return i + 1
    for i in range(min(limit, len(body)), max(floor, 1) - 1, -1):
        if i < len(body) and body[i].isspace():
            return i
    return limit


# --- summarizers --------------------------------------------------------------------


@dataclass
class LLMSummarizer:
    """Summarizes with an LLM through `generate(prompt) -> text`, escalating on length.

    Every failure is a `SummarizerError` (the cause attached), so callers catch one type
    and leave their data untouched.
    """

    generate: Generate

    async def summarize(self, text: str, opts: SummarizeOptions) -> str:
        if not text.strip():
            raise SummarizerError("nothing to summarize: the source text is empty")
        target = target_for(text, opts)
        opts = replace(opts, target_tokens=target)
        if opts.handoff:
            return await self._ask(text, opts)
        result = await self._ask(text, opts)
        if not over_target(result, target):
            return result
        if not opts.aggressive:
            log.info(
                "summary of %d tokens exceeds its target of %d: retrying aggressively",
                estimate_tokens(result),
                target,
            )
            result = await self._ask(text, replace(opts, aggressive=True))
            if not over_target(result, target):
                return result
        log.info(
            "aggressive summary of %d tokens still exceeds its target of %d: truncating",
            estimate_tokens(result),
            target,
        )
        return truncate_to_tokens(result, target)

    async def _ask(self, text: str, opts: SummarizeOptions) -> str:
        try:
            out = await self.generate(build_prompt(text, opts))
        except SummarizerError:
            raise
        except Exception as exc:
            raise SummarizerError(f"summarizer call failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(out, str) or not out.strip():
            raise SummarizerError("empty summary response")
        return out.strip()


@dataclass
class StaticSummarizer:
    """Returns a fixed text (tests). `fail=True` (or an exception instance) makes every
    call raise; `calls` records what was asked, for assertions."""

    text: str = "summary"
    fail: bool | BaseException = False
    calls: list[tuple[str, SummarizeOptions]] = field(default_factory=list)

    async def summarize(self, text: str, opts: SummarizeOptions) -> str:
        self.calls.append((text, opts))
        if isinstance(self.fail, BaseException):
            raise self.fail
        if self.fail:
            raise SummarizerError("static summarizer told to fail")
        return self.text


@dataclass
class TruncatingSummarizer:
    """Deterministic, no LLM: the source cut to its target (benchmarks, tests, offline).

    Handoff requests get the source under a `## Current State` heading, so callers that
    expect the handoff structure still find one."""

    calls: int = 0

    async def summarize(self, text: str, opts: SummarizeOptions) -> str:
        self.calls += 1
        if not text.strip():
            raise SummarizerError("nothing to summarize: the source text is empty")
        target = target_for(text, opts)
        if opts.handoff:
            heading = "## Current State\n"
            body = truncate_to_tokens(text.strip(), max(1, target - estimate_tokens(heading)))
            return heading + body
        return truncate_to_tokens(text.strip(), target)
