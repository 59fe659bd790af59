"""The results as JSON-ready data and as the printed table."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from typing import Any

from benchmarks.quality.evaluate import Run, Series, Tally
from benchmarks.quality.metrics import mean, median

NOTES = (
    "LoCoMo: evidence-turn recall over category 1-4 questions; a turn counts when its "
    "content is in the prompt (kept verbatim or as a TRIM excerpt; a MASK placeholder "
    "does not count).",
    "SWE: hunk coverage pooled over all hunks of the evaluable trajectories; the "
    "system prompt, the task and the last two messages are kept by every method.",
    "SWE needed-later recall: at 25/50/75/100% of each trajectory, the share of earlier "
    "tool-output lines (>= 25 chars) that a later assistant message or the patch holds "
    "and the pruned prompt still holds verbatim; mean over steps. Steps run in "
    "trajectory order; the engine keeps the conversation warm and indexes only new messages.",
    "Loss by cause: each lost evidence turn or hunk is charged to the decision on the "
    "chunk that held it which came closest to keeping it (TRIM excerpt, then MASK "
    "placeholder, then removal: coherence repair, with its group, by value per token).",
    "gemini-cli counts only what Gemini CLI keeps verbatim: it would summarise the "
    "part before its split point with an LLM, which is not run here.",
    "Refused: cases (questions, trajectories, steps; per budget) the engine refused, "
    "scored as the client's fallback (the newest turns that fit). The SWE query is "
    "clipped to the service's limit as a client clips it, so none should be.",
    "Budgets are shares of the prompt's cl100k tokens; kept_share is what each method "
    "actually kept (peers decide by their own measure and may overshoot).",
)


def label(budget: float) -> str:
    return f"{round(budget * 100)}%"


def tally_json(tally: Tally, swe: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "items": len(tally.scores),
        "kept_share": mean(tally.kept_share),
    }
    if swe:
        data["coverage"] = tally.covered / tally.hunks if tally.hunks else float("nan")
        data["mean_trajectory_coverage"] = mean(tally.scores)
        data["all_hunks_share"] = mean([float(c) for c in tally.complete])
        data["needed_later_recall"] = mean(tally.all_needed())
        data["needed_later_steps"] = len(tally.all_needed())
        data["needed_later_by_point"] = {
            label(point): mean(tally.needed[point]) for point in sorted(tally.needed)
        }
    else:
        data["recall"] = mean(tally.scores)
        data["all_evidence_share"] = mean([float(c) for c in tally.complete])
    data["lost_by_cause"] = dict(tally.losses.most_common())
    data["refused"] = tally.refused
    return data


def series_json(series: Series | None, swe: bool) -> dict[str, Any] | None:
    if series is None:
        return None
    return {
        "budgets": {label(b): tally_json(t, swe) for b, t in series.tallies.items()},
        "median_ms_per_plan": median(series.ms),
        "plans": len(series.ms),
    }


def results_json(run: Run, names: Sequence[str], meta: dict[str, Any]) -> dict[str, Any]:
    return {
        **meta,
        "budgets": run.budgets,
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "methods": {
            name: {
                "locomo": series_json(run.locomo.get(name), swe=False),
                "swe": series_json(run.swe.get(name), swe=True),
            }
            for name in names
            if name not in run.unavailable
        },
        "unavailable": run.unavailable,
        "notes": list(NOTES),
    }


def metric(results: dict[str, Any], method: str, dataset: str, budget: float, key: str) -> float:
    series = results["methods"][method][dataset]
    if series is None:
        return float("nan")
    return float(series["budgets"][label(budget)][key])


def fmt(value: float, digits: int = 3) -> str:
    return "-" if value != value else f"{value:.{digits}f}"  # NaN: no data


QUALITY_COLUMNS = (
    ("LoCoMo recall", "locomo", "recall"),
    ("LoCoMo all-evidence", "locomo", "all_evidence_share"),
    ("SWE hunk coverage", "swe", "coverage"),
    ("SWE needed-later recall", "swe", "needed_later_recall"),
)
KEPT_COLUMNS = (
    ("LoCoMo kept tokens", "locomo", "kept_share"),
    ("SWE kept tokens", "swe", "kept_share"),
)


def table(results: dict[str, Any], columns: Sequence[tuple[str, str, str]], timing: bool) -> str:
    """Rows: methods; per column group (title, data set, metric) one column
    per budget under a group title; with `timing`, the median ms per plan."""
    budgets: list[float] = results["budgets"]
    titles = ["", *(t for t, _, _ in columns for _ in budgets)]
    header = ["method", *(label(b) for _ in columns for b in budgets)]
    if timing:
        titles += ["ms/plan", "ms/plan", ""]
        header += ["LoCoMo", "SWE", "refused"]
    rows = [header]
    for name, data in results["methods"].items():
        row = [name, *(fmt(metric(results, name, d, b, k)) for _, d, k in columns for b in budgets)]
        if timing:
            row += [
                fmt(s["median_ms_per_plan"], 2) if s else "-" for s in (data["locomo"], data["swe"])
            ]
            row.append(str(refusals(data)))
        rows.append(row)
    return render(titles, rows)


def render(titles: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows (the header first) right-aligned under group titles."""
    widths = fit_titles(titles, [max(len(r[i]) for r in rows) for i in range(len(titles))])
    shown = [group_titles(titles, widths)]
    shown += [[cell.rjust(w) for cell, w in zip(r, widths, strict=True)] for r in rows]
    lines = ["  ".join(r) for r in shown]
    lines.insert(2, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def refusals(data: dict[str, Any]) -> int:
    """Cases of one method the engine refused, over both data sets and every budget."""
    series = [s for s in (data["locomo"], data["swe"]) if s]
    return sum(int(t.get("refused", 0)) for s in series for t in s["budgets"].values())


def needed_table(results: dict[str, Any]) -> str:
    """SWE needed-later recall per method: per budget, one column per point
    of the trajectory (25/50/75/100%) and the mean over all steps."""
    budgets: list[float] = results["budgets"]
    points = sorted(
        {
            p
            for data in results["methods"].values()
            if data["swe"]
            for t in data["swe"]["budgets"].values()
            for p in t.get("needed_later_by_point", {})
        },
        key=lambda p: float(p.rstrip("%")),
    )
    titles = ["", *(f"budget {label(b)}" for b in budgets for _ in [*points, "all"])]
    header = ["method"]
    for _ in budgets:
        header += [f"@{p}" for p in points] + ["all"]
    rows = [header]
    for name, data in results["methods"].items():
        row = [name]
        for budget in budgets:
            tally = data["swe"]["budgets"][label(budget)] if data["swe"] else {}
            by_point = tally.get("needed_later_by_point", {})
            row += [fmt(by_point.get(p, float("nan"))) for p in points]
            row.append(fmt(tally.get("needed_later_recall", float("nan"))))
        rows.append(row)
    return render(titles, rows)


def loss_table(results: dict[str, Any], method: str) -> str:
    """Lost evidence turns and hunks of one method, by cause, per budget."""
    budgets: list[float] = results["budgets"]
    data = results["methods"].get(method)
    if not data:
        return f"(no results for {method})"
    columns = [(d, b) for d in ("locomo", "swe") if data[d] for b in budgets]
    counts = {(d, b): data[d]["budgets"][label(b)]["lost_by_cause"] for d, b in columns}
    causes = sorted({c for found in counts.values() for c in found})
    header = ["cause", *(f"{'LoCoMo' if d == 'locomo' else 'SWE'} {label(b)}" for d, b in columns)]
    rows = [header]
    for name in causes:
        rows.append([name, *(str(counts[col].get(name, 0)) for col in columns)])
    rows.append(["lost in all", *(str(sum(counts[col].values())) for col in columns)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def spans(titles: Sequence[str]) -> list[tuple[int, int]]:
    """[start, end) of each run of equal titles."""
    runs: list[tuple[int, int]] = []
    for i, title in enumerate(titles):
        if runs and titles[runs[-1][0]] == title:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


def fit_titles(titles: Sequence[str], widths: Sequence[int]) -> list[int]:
    """Column widths, the last column of a group widened so its title fits."""
    fitted = list(widths)
    for start, end in spans(titles):
        span = sum(fitted[start:end]) + 2 * (end - start - 1)
        fitted[end - 1] += max(0, len(titles[start]) - span)
    return fitted


def group_titles(titles: Sequence[str], widths: Sequence[int]) -> list[str]:
    """Each group's title centred over the columns it spans."""
    cells = []
    for start, end in spans(titles):
        span = sum(widths[start:end]) + 2 * (end - start - 1)
        cells.append(titles[start].center(span))
    return cells
