"""What each model call of a replayed session costs with a provider prompt cache.

A provider caches the prompt's prefix: a call pays the full input price for
the tokens after the part it shares with the previous call of the same
session, and `ratio` times that price for the shared part. Here the shared
part is counted in whole messages: a message is cached when it and every
message before it are byte-identical (role and text) to the previous prompt's.
Cache-write surcharges, time-to-live and minimum cacheable sizes are not
modelled (see the README's Session replay section).

>>> tokens = {"sys": 10, "task": 5, "out": 20, "new": 7}
>>> count = lambda texts: [tokens[t] for t in texts]
>>> first = (("system", "sys"), ("user", "task"))
>>> second = (*first, ("user", "out"))
>>> [(c.prompt_tokens, c.cached_tokens) for c in bill_calls([first, second], count)]
[(15, 0), (35, 15)]
>>> billed_tokens(35, 15, 0.25)
23.75
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.quality.datasets import CountTokens
from benchmarks.replay.sessions import Prompt


@dataclass(frozen=True, slots=True)
class Billing:
    """One call's input: its prompt's tokens and how many of them are a
    cacheable prefix shared with the previous call's prompt."""

    prompt_tokens: int
    cached_tokens: int

    def billed(self, ratio: float) -> float:
        return billed_tokens(self.prompt_tokens, self.cached_tokens, ratio)


def billed_tokens(prompt_tokens: int, cached_tokens: int, ratio: float) -> float:
    """Input tokens at the full price: uncached + ratio x cached."""
    return prompt_tokens - cached_tokens + ratio * cached_tokens


def shared_prefix(previous: Prompt, current: Prompt) -> int:
    """How many leading messages of `current` equal `previous`'s."""
    shared = 0
    for before, now in zip(previous, current, strict=False):
        if before != now:
            break
        shared += 1
    return shared


def bill_calls(prompts: Sequence[Prompt], count: CountTokens) -> list[Billing]:
    """Each prompt of one session's calls, in call order, billed against the one before it."""
    billings = []
    previous: Prompt = ()
    for prompt in prompts:
        tokens = count([text for _, text in prompt])
        shared = shared_prefix(previous, prompt)
        billings.append(Billing(sum(tokens), sum(tokens[:shared])))
        previous = prompt
    return billings
