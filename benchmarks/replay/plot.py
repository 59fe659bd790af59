"""Cumulative billed input tokens over the calls of one session, one line per
method, a cross on each call over the window (PNG)."""

from __future__ import annotations

from itertools import accumulate
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt

from benchmarks.replay.ledger import Billing


def plot_cumulative(
    billed: dict[str, list[Billing]], ratio: float, window: int, title: str, path: Path
) -> None:
    """`billed`: per method, the session's calls in order."""
    figure, axis = plt.subplots(figsize=(8, 4.8))
    for name, billings in billed.items():
        totals = list(accumulate(b.billed(ratio) for b in billings))
        ctxopt = name == "ctxopt"
        (line,) = axis.plot(
            range(1, len(totals) + 1),
            totals,
            "-" if ctxopt else "--",
            label=name,
            linewidth=2 if ctxopt else 1.3,
        )
        over = [
            (i + 1, t)
            for i, (b, t) in enumerate(zip(billings, totals, strict=True))
            if b.prompt_tokens > window
        ]
        if over:
            axis.plot(*zip(*over, strict=True), "x", color=line.get_color(), markersize=5)
    axis.plot([], [], "x", color="gray", label="over the window")
    axis.set_title(title, fontsize="medium")
    axis.set_xlabel(f"model call (window {window:,} cl100k tokens)")
    axis.set_ylabel(f"cumulative billed input tokens (cached at {ratio:g}x)")
    axis.grid(alpha=0.3)
    axis.legend(loc="upper left", fontsize="small")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
