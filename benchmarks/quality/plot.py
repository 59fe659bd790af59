"""Recall against budget, one line per method, one panel per data set (PNG)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt

from benchmarks.quality.report import metric

PANELS = (
    ("LoCoMo evidence-turn recall", "locomo", "recall"),
    ("SWE-agent hunk coverage", "swe", "coverage"),
    ("SWE-agent needed-later recall", "swe", "needed_later_recall"),
)


def plot_recall(results: dict[str, Any], path: Path) -> None:
    budgets = sorted(results["budgets"])
    percents = [b * 100 for b in budgets]
    figure, axes = plt.subplots(1, len(PANELS), figsize=(16, 4.5), sharey=True)
    for axis, (title, dataset, key) in zip(axes, PANELS, strict=True):
        for name in results["methods"]:
            values = [metric(results, name, dataset, b, key) for b in budgets]
            if any(v == v for v in values):  # skip methods with no data here
                style = "-" if name == "default" else "--"
                axis.plot(percents, values, style, marker="o", label=name)
        axis.set_title(title)
        axis.set_xlabel("token budget (% of the prompt, cl100k)")
        axis.set_xticks(percents)
        axis.set_ylim(0, 1.02)
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("share kept")
    axes[-1].legend(loc="lower right", fontsize="small")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
