"""Prices per million tokens, and the cost of one model call from its usage."""

from __future__ import annotations

from dataclasses import dataclass, replace

from runtime import ConfigurationError, Usage


@dataclass(frozen=True, slots=True)
class Price:
    """What a model charges per million tokens, in one currency (say USD).

    Attributes:
        input: Per million input tokens.
        output: Per million output tokens.
        cached_input: Per million input tokens read from the cache (default: `input`).
        cache_write: Per million input tokens written to the cache (default: `input`).
    """

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None

    def __post_init__(self) -> None:
        for label, value in (
            ("input", self.input),
            ("output", self.output),
            ("cached_input", self.cached_input),
            ("cache_write", self.cache_write),
        ):
            if value is not None and value < 0:
                raise ConfigurationError(f"a model price cannot be negative ({label}={value})")

    def cost(self, usage: Usage) -> float:
        """The cost of a call with this usage."""
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        written = min(usage.cache_write_tokens, usage.prompt_tokens - cached)
        plain = usage.prompt_tokens - cached - written
        cached_price = self.input if self.cached_input is None else self.cached_input
        write_price = self.input if self.cache_write is None else self.cache_write
        total = (
            plain * self.input
            + cached * cached_price
            + written * write_price
            + usage.completion_tokens * self.output
        )
        # Rounded so that sums over many calls stay readable; far below a cent.
        return round(total / 1_000_000, 9)


def priced(usage: Usage, price: Price | None) -> Usage:
    """`usage` with its cost filled in from `price` (unchanged without a price)."""
    if price is None:
        return usage
    return replace(usage, cost=price.cost(usage))
