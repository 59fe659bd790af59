"""The Pareto plot of the host benchmark: per host, billed input against the
host alone (x) and needed-later recall (y); ctxopt's curve over its schedule,
the host's point and its peers' points. One row per section (the long
sessions first).

    python -m benchmarks.hosts.plot RUN.json [RUN.json ...] --out PNG

plots several runs of the same trajectories as one: every run's rows (a
later run's row of the same host and method replaces an earlier one) and
every run's ctxopt points (those of a run at another Gemini CLI threshold
named with it).
"""

from __future__ import annotations

import argparse
import json
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
                label="ctxopt (T/L/F+R)",
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


def merged(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """`runs` as one result: the first run's frame, every run's rows and points."""
    out: dict[str, Any] = {**runs[0], "rows": [], "frontier": []}
    if "long" in runs[0]:
        out["long"] = {**runs[0]["long"], "rows": [], "frontier": []}
    for run in runs:
        threshold = run.get("gemini_threshold")
        tag = "" if threshold is None else f" (Gemini {threshold:g})"
        for name, section in (("", run), ("long", run.get("long"))):
            if section is None or (name and name not in out):
                continue
            into = out[name] if name else out
            into["rows"] = [
                r
                for r in into["rows"]
                if (r["host"], r["method"])
                not in {(n["host"], n["method"]) for n in section["rows"]}
            ] + section["rows"]
            into["frontier"] += [
                {**p, "schedule": p["schedule"] + tag} for p in section["frontier"]
            ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="benchmarks.hosts JSON files")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    args = parser.parse_args()
    plot(merged([json.loads(run.read_text()) for run in args.runs]), args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
