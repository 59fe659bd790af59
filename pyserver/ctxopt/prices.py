"""Model prices: list prices per million tokens and each provider's cache rules.

One home for what a token costs, read by the gateway (when a collection pays
for itself) and by the usage ledger (what a user saved). Cache rules are
shares of the model's base input price, because that is how every provider
states them: a cached prefix is read at `cache_read`, what follows the first
changed byte is written at `cache_write` (1 where writing costs nothing
extra). Figures are list prices for the standard tier (prompts up to 200k
tokens on Gemini), checked on `CHECKED`; sources beside each provider.
"""

from __future__ import annotations

from dataclasses import dataclass

CHECKED = "2026-11-27"


@dataclass(frozen=True, slots=True)
class CacheRules:
    """How a provider bills a prompt that repeats an earlier prefix."""

    cache_read: float  # share of the input price for a cached prefix
    cache_write: float  # share for input after the first changed byte
    ttl_seconds: int  # an unread prefix is gone after this long
    min_cacheable_tokens: int  # shorter prompts are never cached


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """One model family's list prices in US dollars per million tokens."""

    provider: str  # "anthropic", "openai" or "gemini"
    input_per_mtok: float
    output_per_mtok: float
    cache: CacheRules

    @property
    def output_share(self) -> float:
        """An output token's price in input tokens (5 on Claude, 8 on GPT-5)."""
        return self.output_per_mtok / self.input_per_mtok

    def input_cost(self, *, uncached: int, cached: int) -> float:
        """Dollars for a prompt of `cached` prefix tokens and `uncached` after it."""
        shares = uncached * self.cache.cache_write + cached * self.cache.cache_read
        return shares * self.input_per_mtok / 1e6


# Anthropic: https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching
# (5-minute writes 1.25x, reads 0.1x, at least 1,024 tokens on Sonnet and Opus)
# and https://www.anthropic.com/pricing#api
ANTHROPIC_CACHE = CacheRules(
    cache_read=0.1, cache_write=1.25, ttl_seconds=300, min_cacheable_tokens=1024
)
# OpenAI: https://platform.openai.com/docs/guides/prompt-caching (automatic from
# 1,024 tokens, no write premium, kept 5-10 minutes idle) and
# https://openai.com/api/pricing (cached input at a tenth on the GPT-5 family)
OPENAI_CACHE = CacheRules(
    cache_read=0.1, cache_write=1.0, ttl_seconds=300, min_cacheable_tokens=1024
)
# Gemini: https://ai.google.dev/gemini-api/docs/caching (implicit caching from
# 2,048 tokens on Pro models, billed at a tenth from the 2.5 family on) and
# https://ai.google.dev/gemini-api/docs/pricing
GEMINI_CACHE = CacheRules(
    cache_read=0.1, cache_write=1.0, ttl_seconds=300, min_cacheable_tokens=2048
)

# Longest prefix wins; a model matching none is priced as its provider's default.
MODEL_PRICES: dict[str, ModelPrice] = {
    "claude-opus-4-5": ModelPrice("anthropic", 5.0, 25.0, ANTHROPIC_CACHE),
    "claude-opus-4-6": ModelPrice("anthropic", 5.0, 25.0, ANTHROPIC_CACHE),
    "claude-opus-4": ModelPrice("anthropic", 15.0, 75.0, ANTHROPIC_CACHE),
    "claude-sonnet": ModelPrice("anthropic", 3.0, 15.0, ANTHROPIC_CACHE),
    "claude-haiku-4": ModelPrice("anthropic", 1.0, 5.0, ANTHROPIC_CACHE),
    "gpt-5-mini": ModelPrice("openai", 0.25, 2.0, OPENAI_CACHE),
    "gpt-5.2": ModelPrice("openai", 1.75, 14.0, OPENAI_CACHE),
    "gpt-5.4": ModelPrice("openai", 2.5, 15.0, OPENAI_CACHE),
    "gpt-5": ModelPrice("openai", 1.25, 10.0, OPENAI_CACHE),
    "gemini-3-pro": ModelPrice("gemini", 2.0, 12.0, GEMINI_CACHE),
    "gemini-2.5-pro": ModelPrice("gemini", 1.25, 10.0, GEMINI_CACHE),
    "gemini-2.5-flash": ModelPrice("gemini", 0.30, 2.5, GEMINI_CACHE),
}
PROVIDER_DEFAULTS: dict[str, ModelPrice] = {
    "anthropic": MODEL_PRICES["claude-sonnet"],
    "openai": MODEL_PRICES["gpt-5"],
    "gemini": MODEL_PRICES["gemini-2.5-pro"],
}


def price_of(model: str, provider: str) -> ModelPrice:
    """The list price of `model`, or its provider's default when unknown.

    >>> price_of("claude-sonnet-4-5-20250929", "anthropic").input_per_mtok
    3.0
    >>> price_of("gpt-5.2-codex", "openai").output_share
    8.0
    >>> price_of("some-new-model", "gemini").cache.min_cacheable_tokens
    2048
    """
    name = model.lower().removeprefix("models/")
    matches = [prefix for prefix in MODEL_PRICES if name.startswith(prefix)]
    if matches:
        return MODEL_PRICES[max(matches, key=len)]
    return PROVIDER_DEFAULTS[provider]
