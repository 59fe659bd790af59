"""The Pareto plot of the host benchmark: per host, billed input against the
host alone (x) and needed-later recall (y); ctxopt's curve over its schedule,
the host's point and its peers' points. One row per section (the long
sessions first)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.hosts.legs import CTXOPT
from benchmarks.hosts.profiles import PROFILES

MARKERS = {"host": "s", "host + context editing": "D", "host + headroom": "^"}


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sections = []
    if "long" in results:
        long = results["long"]
        title = f"{long['sessions']} sessions of {long['trajectories_per_session']}, real frames"
        sections.append((title, long))
    sections.append((f"{results['trajectories']} trajectories", results))
    fig, axes = plt.subplots(
        len(sections),
        len(PROFILES),
        figsize=(4.2 * len(PROFILES), 3.8 * len(sections)),
        squeeze=False,
    )
    for (title, section), row in zip(sections, axes, strict=True):
        for profile, axis in zip(PROFILES, row, strict=True):
            points = [p for p in section["frontier"] if p["host"] == profile.name]
            points.sort(key=lambda p: p["billed_vs_host"])
            axis.plot(
                [p["billed_vs_host"] for p in points],
                [p["needed_later_recall"] for p in points],
                "o-",
                label="ctxopt (threshold/target)",
            )
            for p in points:
                axis.annotate(
                    p["schedule"], (p["billed_vs_host"], p["needed_later_recall"]), fontsize=6
                )
            for r in section["rows"]:
                if r["host"] == profile.name and r["method"] != CTXOPT:
                    axis.plot(
                        r["billed_vs_host"],
                        r["needed_later_recall"],
                        MARKERS.get(r["method"], "x"),
                        label=r["method"],
                    )
            axis.set_xlabel("billed vs the host alone (input + summaries' output)")
            axis.set_ylabel("needed-later recall")
            axis.set_title(f"{profile.name}: {title}", fontsize=8)
            axis.legend(fontsize=6)
            axis.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
