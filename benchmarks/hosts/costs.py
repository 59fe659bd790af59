"""What a leg bills and how long its user waits.

Billed tokens are in units of the provider's base input price: each call's
prompt at the cache prices of ctxopt.prices (the prefix it shares with the
call before at `cache_read`, the rest at `cache_write`: 0.1 and 1.25 on
Anthropic, 0.1 and 1 on OpenAI and Gemini), plus each summary a host has the
model write, `Summaries.output_tokens` at the output price converted to
input tokens by `output_share` (5 on Claude Sonnet, 8 on GPT-5 and Gemini
2.5 Pro). The stall is the time the user waits for those summaries at
`Summaries.decode_tokens_per_s` (time to first token and the prefill of the
summarised history not counted: a lower bound).

>>> from ctxopt.prices import price_of
>>> claude = price_of("claude-sonnet-4-6", "anthropic")
>>> bill([Billing(1000, 800)], 1, Summaries(output_tokens=100), claude)
Bill(input_tokens=330.0, output_tokens=500.0)
>>> Summaries(output_tokens=630, decode_tokens_per_s=63).stall_s(2)
20.0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxopt.prices import ModelPrice

from benchmarks.replay.ledger import Billing

# A summary's output tokens. Claude Code's summary of a real session came to 1,576 tokens after
# it strips the <analysis> block it also generates (tiann/hapi#1691: "Compacted (34,176 -> 1,576
# tokens)"); its compaction prompt (benchmarks/hosts/frames/claude.json) asks for nine sections
# with code snippets, capped at 20,000 output tokens (COMPACT_MAX_OUTPUT_TOKENS,
# dust-tt/dust#23767).
SUMMARY_TOKENS = 2_000
# Claude Sonnet 4.5's median output speed on Anthropic's API, 63 tokens/s (Artificial Analysis,
# as quoted at lattice.uptownhr.com/claude-opus-4-5/speed-analysis); Sonnet 4.6 measured
# 95 tokens/s median on bridgebench.ai/speedbench/claude-sonnet-4-6.
DECODE_TOKENS_PER_S = 63.0
# Summary lengths of the sensitivity line (docs/agents.md)
SENSITIVITY_TOKENS = (500, 2_000, 8_000, 20_000)


@dataclass(frozen=True, slots=True)
class Summaries:
    """What a summary the host asks for costs beyond its input."""

    output_tokens: int = SUMMARY_TOKENS
    decode_tokens_per_s: float = DECODE_TOKENS_PER_S

    def stall_s(self, summaries: int) -> float:
        """Seconds the user waits for `summaries` summaries to be written."""
        return summaries * self.output_tokens / self.decode_tokens_per_s


@dataclass(frozen=True, slots=True)
class Bill:
    """A leg's bill in base-input-token units."""

    input_tokens: float
    output_tokens: float

    @property
    def total(self) -> float:
        return self.input_tokens + self.output_tokens


def input_billed(billing: Billing, price: ModelPrice) -> float:
    """One call's input: its cached prefix at the read price, the rest at the write price."""
    uncached = billing.prompt_tokens - billing.cached_tokens
    return uncached * price.cache.cache_write + billing.cached_tokens * price.cache.cache_read


def bill(billings: Sequence[Billing], summaries: int, cost: Summaries, price: ModelPrice) -> Bill:
    """Every call's input (summarising calls included) and `summaries` summaries' output."""
    output = summaries * cost.output_tokens * price.output_share
    return Bill(sum(input_billed(b, price) for b in billings), output)


def with_summary_tokens(row_input: float, summaries: int, tokens: int, price: ModelPrice) -> float:
    """A row's billed tokens had each summary been `tokens` long (input unchanged)."""
    return row_input + summaries * tokens * price.output_share
