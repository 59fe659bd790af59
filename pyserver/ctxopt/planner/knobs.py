"""Every tuning constant of scoring and planning, in one place.

`Tuning` holds the knobs an engine is built with (tuned on
../shared/datasets; the quality benchmark's ablations and cross-validation
pass their own). The server-level defaults below are what `Config` offers as
`CTXOPT_*` settings; `Config` reads them here. Nothing in this module imports
from the rest of ctxopt.
"""

from __future__ import annotations

from dataclasses import dataclass

# Server-level defaults, overridable per process through `Config`.
RECENCY_HALF_LIFE_TURNS = 8.0  # turns after which the recency score halves
NEIGHBOUR_SHARE = 0.5  # the turn before or after a hit often holds the question or the answer
OLD_GENERATION_AFTER = 3  # collections survived before a chunk counts as old
INCREMENTAL_BATCH = 64  # most removal steps of a minor collection

# Shape of the shrunk texts.
TRIM_CONTEXT_LINES = 2  # lines kept either side of a query-relevant line in a TRIM excerpt
MASK_EDGE_CHARS = 160  # characters of the head and the tail a MASK placeholder shows

# Coherence repairs are few; a plan that still changes after this many rounds stops.
MAX_REPAIR_ROUNDS = 8


@dataclass(frozen=True, slots=True)
class Tuning:
    """Knobs of the hybrid strategy and its scoring (tuned on ../shared/datasets)."""

    density_exponent: float = 0.0  # value / tokens**exponent; chosen by cross-validation
    # The same for an agent's step (a unit holding a tool call or its output): a step's value
    # is spread over its lines, so a long one is worth less per token than a turn of
    # conversation, whose exponent stays apart (cross-validated: 0 or 0.7; with line
    # excerpts, 0.7 wins back the hunk coverage excerpts had cost at 20%).
    step_density_exponent: float = 0.7
    trim_min_tokens: int = 2000  # shorter ones are kept whole or stashed (excerpts lost hunks)
    trim_min_lines: int = 6
    trim_fraction: float = 0.5  # an excerpt of a quarter lost the code a fix needed (SWE)
    trim_retention: float = 0.8  # share of a relevant chunk's value its excerpt keeps
    trim_retention_irrelevant: float = 0.3
    mask_min_tokens: int = 330  # a placeholder is ~110 tokens: mask only what it shrinks well
    mask_retention: float = 0.15
    summary_discount: float = 0.3  # value left to chunks a kept summary covers
    aggressive_target: float = 0.9
    shrink_worth: float = 0.8  # a shrink that keeps more than this share of the tokens is not one
    reachability_first: bool = True  # inside a tier, unreachable chunks go first
    anchored_excerpts: bool = (
        True  # shrink a chunk to the lines other chunks repeat (text/lines.py)
    )
    # What a later chunk prints again loses that share of value (cross-validated, with the
    # quoted order: the pair keeps more of what an agent needs next and a hunk more at 20%).
    discount_repeated: bool = True
    anchor_context: int = 0  # lines kept either side of an anchor line in its excerpt
    anchor_retention: float = 0.5  # share of a chunk's value its anchored excerpt keeps
    anchors_last: bool = True  # anchored excerpts go only after everything else of their tier
    link_df_share: float = 0.0  # a query term at most this share of chunks hold is a link
    # Hybrid order: a unit the model has quoted goes after the rest of its tier
    # (below the echo holders); the budget strategy always orders by it. On, with the
    # repeated-output discount: cross-validation chooses only what keeps LoCoMo recall and
    # SWE hunk coverage at every budget (benchmarks/quality/cv.py); alone it costs a hunk
    # at 20%, the pair does not.
    quoted_last: bool = True
    # Line excerpts of tool outputs (scoring/line_value.py): an output shrinks
    # to the lines its signals point at, each with its enclosing def/class
    # header and `line_context` lines either side, within `line_budget` of its
    # tokens. On the development trajectories, lines the model quoted hold 60%
    # of the later-needed lines in 8% of the output text, and lines naming what
    # the model wrote 72% in 24%; query terms, errors and cited numbers point
    # at no more than their share, so they weigh half (cross-validated: 0 or 0.5).
    line_excerpts: bool = True
    line_context: int = 1
    line_budget: float = 1.0  # tighter caps (0.3, 0.5) lost needed lines at every budget
    line_retention: float = 0.8  # share of an output's value its line excerpt keeps
    # A second, tighter size: the best lines within this share of the output's
    # tokens; the plan moves an output from excerpt to tight excerpt to out by value
    # per token, so a big output can keep its few best lines instead of going whole
    # (0: one size; cross-validated: 0 or 0.1, chosen with the quoted order; shares
    # of 0.2 and more lost hunks at 20%).
    line_tight_share: float = 0.1
    line_rare_share: float = 0.05  # query terms at most this share of chunks hold count
    line_relevance: float = 0.5
    line_identifier: float = 1.0
    line_cited: float = 0.5
    line_error: float = 0.5
    line_echoed: float = 1.0
    # Pseudo-relevance feedback: the query grows by the rarest terms its best
    # hits share, so a turn that answers in other words than the question still scores.
    feedback_weight: float = 0.3  # beside the query's own weight 1; chosen by cross-validation
    feedback_docs: int = 3  # the top hits the expansion reads
    feedback_terms: int = 8  # terms added
