"""Tool outputs the model has just answered: each is shrunk once, as it arrives.

A tool output is sent whole while the model works on it (the latest turn is
protected). On the next call the model has answered it; from then on its
excerpt (or, when it holds nothing the task needs, its placeholder) serves,
and never changes again. Only the prompt's tail changes, where the new
content is written to the provider's cache anyway, so the rewrite is nearly
free, and the prompt grows by excerpts rather than whole outputs: collections
that rewrite the whole prompt come far more rarely. Each output is judged
once: `Arrivals.upto` moves past it whether or not it shrank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

from ctxopt.api.gateway.chunks import groups_of
from ctxopt.api.gateway.formats.conversation import Turn
from ctxopt.model import Budget, OptimizeOptions, Roots, Strategy

# Outputs shrink by the hybrid strategy's steps (an excerpt, its tighter size, or out,
# by value per token), the only one that makes excerpts.
STRATEGY = Strategy.HYBRID
# Smaller outputs stay whole: an excerpt's header and gap marks alone take some 30 tokens.
ARRIVAL_MIN_TOKENS = 200


@dataclass(frozen=True, slots=True)
class Arrivals:
    """The answered outputs to shrink now (chunk ids), every chunk of their
    groups (what the engine may change), and the first turn not yet judged."""

    outputs: tuple[str, ...]
    members: frozenset[str]
    upto: int


def arrivals(
    turns: Sequence[Turn],
    ids: Sequence[Sequence[str]],
    *,
    judged: int,
    protected: Set[int],
    tokens: Mapping[str, int],
    min_tokens: int,
) -> Arrivals:
    """The outputs in the turns from `judged` up to the protected tail (the
    latest exchange, which the model has not answered yet) that answer a call
    and hold at least `min_tokens` tokens.

    >>> from ctxopt.api.gateway.formats.conversation import Block
    >>> from ctxopt.model import ChunkKind, Role
    >>> turns = [
    ...     Turn(Role.USER, [Block(ChunkKind.MESSAGE, "task")]),
    ...     Turn(Role.MODEL, [Block(ChunkKind.MESSAGE, "look"),
    ...                       Block(ChunkKind.TOOL_CALL, "ls", call_id="a")]),
    ...     Turn(Role.USER, [Block(ChunkKind.TOOL_RESULT, "x " * 500, answers="a")]),
    ...     Turn(Role.MODEL, [Block(ChunkKind.TOOL_CALL, "cat", call_id="b")]),
    ...     Turn(Role.USER, [Block(ChunkKind.TOOL_RESULT, "y " * 500, answers="b")]),
    ... ]
    >>> ids = [["t"], ["n", "c"], ["r"], ["c2"], ["r2"]]
    >>> found = arrivals(turns, ids, judged=0, protected={0, 3, 4},
    ...                  tokens={"r": 500, "r2": 500}, min_tokens=100)
    >>> found.outputs, sorted(found.members), found.upto
    (('r',), ['c', 'n', 'r'], 3)
    """
    upto = len(turns)
    while upto > judged and upto - 1 in protected:
        upto -= 1
    outputs: list[str] = []
    groups: set[str] = set()
    for t in range(judged, upto):
        for block, cid in zip(turns[t].blocks, ids[t], strict=True):
            answered = block.answers and t not in protected and not turns[t].locked
            if answered and tokens.get(cid, 0) >= min_tokens:
                outputs.append(cid)
                groups.add(block.answers)
    members = {
        cid
        for t in range(max(0, judged - 1), upto)
        for cid, group in zip(ids[t], groups_of(turns[t]), strict=True)
        if group in groups
    }
    return Arrivals(tuple(outputs), frozenset(members), max(judged, upto))


def shrink_options(
    found: Arrivals,
    *,
    live: Set[str],
    tokens: Mapping[str, int],
    seen: int,
    ceiling: int,
    share: float,
    query: str,
) -> OptimizeOptions:
    """A forced collection over `found`'s groups alone (every other live chunk a
    root, so nothing before them changes), landing `1 - share` of the outputs'
    tokens under `seen`, the engine's present size."""
    cut = sum(tokens.get(i, 0) for i in found.outputs) * (1 - share)
    others = [i for i in live if i not in found.members]
    return OptimizeOptions(
        budget=Budget(ceiling, target_tokens=max(1, int(seen - cut))),
        query=query,
        roots=Roots(recent_turns=0, root_ids=tuple(sorted(others))),
        strategy=STRATEGY,
        force=True,
        lean=True,
    )
