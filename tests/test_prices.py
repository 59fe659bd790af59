"""Model prices: longest-prefix lookup, provider defaults, cache billing."""

from __future__ import annotations

import pytest
from ctxopt.prices import MODEL_PRICES, PROVIDER_DEFAULTS, price_of


def test_the_longest_matching_prefix_prices_a_model() -> None:
    assert price_of("claude-opus-4-6", "anthropic").input_per_mtok == 5.0
    assert price_of("claude-opus-4-1-20250805", "anthropic").input_per_mtok == 15.0
    assert price_of("gpt-5-mini-2025", "openai").input_per_mtok == 0.25


def test_an_unknown_model_gets_its_providers_default() -> None:
    assert price_of("claude-next", "anthropic") is PROVIDER_DEFAULTS["anthropic"]
    assert price_of("models/gemini-2.5-pro", "gemini") is MODEL_PRICES["gemini-2.5-pro"]


def test_a_cached_prefix_bills_a_tenth_and_anthropic_writes_a_quarter_more() -> None:
    sonnet = price_of("claude-sonnet-4-5", "anthropic")
    assert sonnet.input_cost(uncached=0, cached=1_000_000) == pytest.approx(0.30)
    assert sonnet.input_cost(uncached=1_000_000, cached=0) == pytest.approx(3.75)
    gpt = price_of("gpt-5", "openai")
    assert gpt.input_cost(uncached=1_000_000, cached=0) == pytest.approx(1.25)
    assert gpt.output_share == 8.0
