"""A summarizer that keeps distinctive words: every word starting with a capital Z, of
the text and of the summary it is given for continuity, in order. A summary built
(directly or through `previous`) on a message holding such a word quotes it, so "no
trace of a forgotten message" is checkable by looking for one."""

from __future__ import annotations

import re

from memory.contract.types import SummarizeOptions

DISTINCTIVE = re.compile(r"\bZ\w+")


class KeepingSummarizer:
    def __init__(self) -> None:
        self.calls = 0

    async def summarize(self, text: str, opts: SummarizeOptions) -> str:
        self.calls += 1
        kept = dict.fromkeys(DISTINCTIVE.findall(f"{opts.previous}\n{text}"))
        return "summary: " + (" ".join(kept) or "nothing distinctive")
