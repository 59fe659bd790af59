"""When the gateway collects, and how deep: from the provider's cache prices and
the session's own growth.

A provider bills a prompt's cached prefix at `cache_read` of its input price
and what follows the first changed byte at `cache_write` (ctxopt.prices). A
collection that changes the prompt near its start is billed again almost
whole on the next call; between collections every call reads its prefix
cheaply. So a collection runs only when the *next* request would cross the
trigger (the host's line or the window, times a share), and lands deep
enough that its rewrite pays for itself before the next one: rewriting L
tokens costs `cache_write * L` once, and each of the `(trigger - L) / growth`
calls until the next collection reads `size - L` fewer tokens at
`cache_read`. Landing lower always bills less (the read saving grows faster
than the rewrite); how low is a recall choice, `landing_share`, capped by
that break-even.

With generations on (generations.py) a collection first tries a *minor* one
that lands at `landing_share` by pruning only the turns since the last full
one; a *full* collection, when the minor one cannot land, goes down to
`full_landing_share` (at most the same break-even), so that minor ones have
room above the old generation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ctxopt.prices import CacheRules

# The weight of the newest call's growth in the running mean: about the last ten calls,
# so one huge tool output moves the estimate without owning it.
GROWTH_WEIGHT = 0.1


@dataclass(frozen=True, slots=True)
class Collection:
    """A collection to run now, and the prompt size it should land at."""

    target: int
    reason: str  # "next call crosses <trigger>", with the landing's rule
    full_target: int  # where a full collection lands (with generations off: `target`)
    fixed: int = 0  # the prompt's start no collection changes (the landings' room is above it)


class Pace:
    """A conversation's growth per call, as `next_growth` keeps it (guarded by
    the conversation's lock, as the rest of its state)."""

    def __init__(self) -> None:
        self.growth = 0.0
        self._last_size = 0

    def observe(self, size: int) -> float:
        """The growth after a call whose prompt (before any collection) has `size` tokens."""
        self.growth = next_growth(self.growth, last_size=self._last_size, size=size)
        self._last_size = size
        return self.growth


def next_growth(previous: float, *, last_size: int, size: int) -> float:
    """The running mean of the prompt's growth per call, after a call of `size`
    tokens that followed one of `last_size` (a shrinking call, as after a
    collection or the host's own compaction, leaves the mean as it was).

    >>> next_growth(0.0, last_size=1000, size=1500)
    500.0
    >>> next_growth(500.0, last_size=1500, size=1600)
    460.0
    >>> next_growth(460.0, last_size=1600, size=900)
    460.0
    """
    grown = size - last_size
    if last_size <= 0 or grown < 0:
        return previous
    if previous <= 0:
        return float(grown)
    return previous + GROWTH_WEIGHT * (grown - previous)


def landing_that_pays(
    cache: CacheRules, *, size: int, trigger: int, growth: float, kept: int = 0
) -> int:
    """The highest landing L whose rewrite is paid back by cheaper reads before
    the prompt grows back to `trigger`: the smaller root of
    `cache_read * (size - L) * (trigger - L) / growth = cache_write * (L - kept)`,
    where the first `kept` tokens stay byte-identical (the frame; for a minor
    collection, the old generation too) and so are not written again.

    >>> from ctxopt.prices import ANTHROPIC_CACHE
    >>> landing_that_pays(ANTHROPIC_CACHE, size=76_000, trigger=76_000, growth=700)
    54218
    >>> landing_that_pays(ANTHROPIC_CACHE, size=76_000, trigger=76_000, growth=700, kept=30_000)
    59841
    >>> landing_that_pays(ANTHROPIC_CACHE, size=76_000, trigger=76_000, growth=0)
    76000
    """
    if growth <= 0:
        return size
    kept = max(0, min(kept, size))
    a = cache.cache_read
    b = cache.cache_read * (size + trigger) + cache.cache_write * growth
    c = cache.cache_read * size * trigger + cache.cache_write * growth * kept
    root = (b - math.sqrt(max(0.0, b * b - 4 * a * c))) / (2 * a)
    return max(kept, min(size, int(root)))


def crosses(*, size: int, growth: float, ceiling: int, trigger_share: float) -> bool:
    """Whether the next call (`size + growth`) reaches `trigger_share` of `ceiling`:
    a collection is due (its landing is `schedule`'s to find).

    >>> crosses(size=72_000, growth=700, ceiling=76_000, trigger_share=0.95)
    True
    """
    return size + growth >= int(ceiling * trigger_share)


def schedule(
    cache: CacheRules,
    *,
    size: int,
    growth: float,
    ceiling: int,
    trigger_share: float,
    landing_share: float,
    full_landing_share: float | None = None,
    fixed: int = 0,
    old_prefix: int = 0,
) -> Collection | None:
    """The collection to run before sending a prompt of `size` tokens, or None.

    It runs when the next call (`size + growth`) would reach `trigger_share`
    of `ceiling` (the lower of the window and the host's line); it lands at
    `landing_share` of the room that the `fixed` start of the prompt (the
    frame and the task, which no collection changes) leaves under `ceiling`,
    or lower where that is the most a rewrite pays for (`landing_that_pays`).
    A share of the room, not of the ceiling, means the same at every scale: a
    20,000-token frame is a tenth of a 200,000-token window and half of a
    40,000-token one. A rewrite starts after the bytes it leaves as they were:
    the fixed start for a full collection, the `old_prefix` (it and the old
    generation's turns) for a minor one, which so may land higher than a full
    one at the same price.

    >>> from ctxopt.prices import ANTHROPIC_CACHE
    >>> schedule(ANTHROPIC_CACHE, size=60_000, growth=700, ceiling=76_000,
    ...          trigger_share=0.95, landing_share=0.3) is None
    True
    >>> schedule(ANTHROPIC_CACHE, size=72_000, growth=700, ceiling=76_000,
    ...          trigger_share=0.95, landing_share=0.3)  # doctest: +NORMALIZE_WHITESPACE
    Collection(target=22800, reason='next call crosses 72200; lands at 30% of the room',
               full_target=22800, fixed=0)
    >>> schedule(ANTHROPIC_CACHE, size=72_000, growth=700, ceiling=76_000,
    ...          trigger_share=0.95, landing_share=0.5, full_landing_share=0.3).full_target
    22800
    >>> schedule(ANTHROPIC_CACHE, size=72_000, growth=3_000, ceiling=76_000,
    ...          trigger_share=0.95, landing_share=0.9).reason
    'next call crosses 72200; lands where the rewrite pays for itself'
    """
    if not crosses(size=size, growth=growth, ceiling=ceiling, trigger_share=trigger_share):
        return None
    trigger = int(ceiling * trigger_share)
    fixed = max(0, min(fixed, ceiling))
    wanted = fixed + int((ceiling - fixed) * landing_share)
    paid = landing_that_pays(
        cache, size=size, trigger=trigger, growth=growth, kept=max(fixed, old_prefix)
    )
    paid_full = landing_that_pays(cache, size=size, trigger=trigger, growth=growth, kept=fixed)
    crossing = f"next call crosses {trigger}"
    full = paid_full
    if full_landing_share is not None:
        full = fixed + int((ceiling - fixed) * full_landing_share)
    full = min(full, paid_full, wanted)
    if paid < wanted:
        return Collection(paid, f"{crossing}; lands where the rewrite pays for itself", full, fixed)
    return Collection(wanted, f"{crossing}; lands at {landing_share:.0%} of the room", full, fixed)
