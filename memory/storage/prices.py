"""What tokens cost: `llm.prices` per model, in currency units per million tokens.

    llm:
      prices:
        gpt-4o-mini: {input: 0.15, cached_input: 0.075, output: 0.60}
        text-embedding-3-small: {input: 0.02}

`cached_input` is what a prompt token served from the server's cache costs (OpenAI bills
it at half or less); absent, it is `input`. A model without a price has no cost shown:
the tokens are still counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the settings read prices; the usage ledger's SQL is not needed for that
    from memory.storage.usage import TokenUsage

PER = 1_000_000


@dataclass(frozen=True)
class Price:
    input: float
    output: float = 0.0
    cached_input: float | None = None

    def cost(self, usage: TokenUsage) -> float:
        cached = min(usage.cached_prompt, usage.prompt)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        return (
            (usage.prompt - cached) * self.input
            + cached * cached_rate
            + usage.completion * self.output
        ) / PER


def format_cost(cost: float) -> str:
    """Two decimals, or up to six significant places for amounts under a cent (one
    conversation's day is often a fraction of a cent)."""
    if cost >= 0.01 or cost == 0:
        return f"{cost:,.2f}"
    return f"{cost:.6f}".rstrip("0")


def total_cost(by_model: Mapping[str, TokenUsage], prices: Mapping[str, Price]) -> float | None:
    """The cost of `by_model`, or None when a model that was used has no price (a
    partial sum would read as the whole bill)."""
    total = 0.0
    for model, usage in by_model.items():
        price = prices.get(model)
        if price is None:
            if usage.total:
                return None
            continue
        total += price.cost(usage)
    return total
