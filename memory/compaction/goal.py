"""When an automatic compaction is worth running and how far it goes: the hysteresis
every provider applies alike (docs/CHAT.md "Compaction and caching").

A model server caches a prompt's unchanged beginning (OpenAI, Anthropic-compatible
servers, llama.cpp's KV cache); a compaction rewrites the context's beginning, so the
request after it is billed in full. Compactions must therefore be rare:

- it runs when the context is over `threshold` (`compaction.max_tokens`) **and** at least
  the gap `threshold - target` of messages outside the kept tail is still unsummarised,
  so one compaction always takes a gap's worth of messages out, and two are at least a
  gap's worth of conversation apart, even when the kept tail alone is over the threshold
  (where compacting a message or two every turn would never shrink the context);
- it summarises the oldest of those messages until the context is estimated at `target`
  (`compaction.target_fraction` of max_tokens), or all of them when that is not enough.

`target` 0 means no target (a provider built without one, `/compact`): everything
outside the kept tail, whenever anything is there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from memory.compaction.summarizer import leaf_target

After = Callable[[int, int], int]


def worth_compacting(context_tokens: int, threshold: int, target: int, loose_tokens: int) -> bool:
    """`context_tokens`: the context as assembled without a budget; `loose_tokens`: the
    messages outside the kept tail that no summary covers yet."""
    if threshold < 0 or context_tokens <= threshold or loose_tokens <= 0:
        return False
    if target <= 0 or target >= threshold:
        return True
    return loose_tokens >= threshold - target


def estimated_after(context_tokens: int, summarised: int) -> int:
    """The context once `summarised` tokens of its messages became a leaf summary."""
    return context_tokens - summarised + leaf_target(summarised)


def parts_to_reach(
    context_tokens: int, target: int, sizes: Iterable[int], after: After = estimated_after
) -> int | None:
    """How many of the oldest parts (messages or chunks, their token `sizes` oldest
    first) to summarise so the context is estimated at `target` at most (`after`:
    context and tokens summarised -> the context then). None for all of them: no target,
    the context under it already (an explicit compaction), or the target out of reach."""
    if target <= 0 or context_tokens <= target:
        return None
    summarised = 0
    for n, size in enumerate(sizes, start=1):
        summarised += size
        if after(context_tokens, summarised) <= target:
            return n
    return None
