"""ctxopt's threshold, target and recent-turn roots chosen by k-fold
cross-validation over the replayed sessions: each fold's setting is chosen on
the other folds and measured on it, so the pooled figures are out-of-fold.

The rule (`choose`) is RULE.

>>> fold_of(["a", "b", "c", "d", "e", "f"], 5)
[['a', 'f'], ['b'], ['c'], ['d'], ['e']]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from benchmarks.replay.report import SessionFigures, Tally

RECALL_GOAL = 0.95
FOLDS = 5
RULE = (
    "on the sessions it may see: the settings with the fewest over-window calls; of those, "
    "the ones billing less than every baseline that stays inside the window (obs-mask, "
    f"langchain) on the same sessions; of those, the cheapest reaching recall {RECALL_GOAL}, "
    "else the highest mean needed-later recall (ties: the cheaper); when none bills less, "
    "the cheapest"
)


class Setting(NamedTuple):
    """One ctxopt configuration of the grid; None leaves the adapter's default."""

    threshold: float  # percent of the window
    target: float
    recent_turns: int | None  # most recent turns kept as roots
    strategy: str | None  # the service's strategy: "hybrid" or "budget"
    step_text: str | None = None  # a tool-calling turn's text: "ephemeral" or "kind" (its kind's)


def fold_of(ids: Sequence[str], k: int) -> list[list[str]]:
    """`ids` dealt round-robin into `k` folds (file order: no fold is one repository's)."""
    return [list(ids[i::k]) for i in range(k)]


def choose(
    grid: Mapping[Setting, Tally],
    baselines: Sequence[Tally],
    sessions: Sequence[str],
    ratio: float,
) -> Setting:
    """The rule of the module docstring, on `sessions` only."""
    seen = {s: t.restricted(sessions) for s, t in grid.items()}
    fewest = min(t.over_window for t in seen.values())
    safe = {s: t for s, t in seen.items() if t.over_window == fewest}
    bar = min((b.restricted(sessions).billed(ratio) for b in baselines), default=float("inf"))
    cheaper = {s: t for s, t in safe.items() if t.billed(ratio) < bar}
    if not cheaper:
        return min(safe, key=lambda s: safe[s].billed(ratio))
    reaching = [s for s, t in cheaper.items() if t.mean_recall() >= RECALL_GOAL]
    if reaching:
        return min(reaching, key=lambda s: cheaper[s].billed(ratio))
    return max(cheaper, key=lambda s: (cheaper[s].mean_recall(), -cheaper[s].billed(ratio)))


def cross_validate(
    grid: Mapping[Setting, Tally],
    baselines: Mapping[str, Tally],
    ids: Sequence[str],
    ratio: float,
    ratios: Sequence[float],
    k: int = FOLDS,
) -> dict[str, Any]:
    """Per fold the setting chosen on the others and its figures on the fold;
    the pooled out-of-fold figures beside the baselines' on the same sessions;
    and the setting the rule chooses on every session (the default)."""
    folds = [f for f in fold_of(ids, min(k, len(ids))) if f]
    out_of_fold: dict[str, SessionFigures] = {}
    per_fold = []
    for number, test in enumerate(folds, 1):
        train = [i for i in ids if i not in set(test)]
        chosen = choose(grid, list(baselines.values()), train or test, ratio)
        part = grid[chosen].restricted(test)
        out_of_fold |= part.by_session
        per_fold.append(
            {
                "fold": number,
                "sessions": len(test),
                "chosen": setting_json(chosen),
                **brief(part, ratio),
                **{
                    f"{name}_billed_tokens": round(b.restricted(test).billed(ratio))
                    for name, b in baselines.items()
                },
            }
        )
    overall = choose(grid, list(baselines.values()), ids, ratio)
    return {
        "folds": len(folds),
        "rule": RULE,
        "per_fold": per_fold,
        "out_of_fold": Tally.of(out_of_fold).summary(ratio, ratios),
        "baselines": {
            name: b.restricted(ids).summary(ratio, ratios) for name, b in baselines.items()
        },
        "chosen_on_all_sessions": setting_json(overall),
    }


def brief(tally: Tally, ratio: float) -> dict[str, Any]:
    return {
        "billed_tokens": round(tally.billed(ratio)),
        "needed_later_recall": round(tally.mean_recall(), 4),
        "over_window_calls": tally.over_window,
        "calls": len(tally.billings),
    }


def setting_json(setting: Setting) -> dict[str, Any]:
    return {
        "threshold_percent": setting.threshold,
        "target_percent": setting.target,
        "recent_turns": setting.recent_turns,
        "strategy": setting.strategy,
        "step_text": setting.step_text,
    }
