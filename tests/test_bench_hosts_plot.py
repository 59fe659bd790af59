"""Several runs of the host benchmark plotted as one (benchmarks/hosts/plot.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.hosts.plot import merged, plot


def _run(schedule: str, threshold: float | None, peer: bool) -> dict[str, Any]:
    rows = [{"host": "Codex CLI", "method": "host", "billed_vs_host": 1.0,
             "needed_later_recall": 0.8}]  # fmt: skip
    if peer:
        rows.append({**rows[0], "method": "host + headroom", "billed_vs_host": 0.98})
    point = {"host": "Codex CLI", "schedule": schedule, "billed_vs_host": 0.8,
             "needed_later_recall": 0.9}  # fmt: skip
    section = {"rows": rows, "frontier": [point]}
    return {"trajectories": 2, "gemini_threshold": threshold, **section,
            "long": {"sessions": 1, "trajectories_per_session": 2, **section}}  # fmt: skip


def test_runs_plot_as_one_with_every_point_and_the_peers_rows(tmp_path: Path) -> None:
    one = merged([_run("95/40/20+70", None, peer=True), _run("95/30/10+70", 0.9, peer=False)])
    for section in (one, one["long"]):
        assert [p["schedule"] for p in section["frontier"]] == [
            "95/40/20+70",
            "95/30/10+70 (Gemini 0.9)",
        ]
        methods = sorted(r["method"] for r in section["rows"])
        assert methods == ["host", "host + headroom"]  # the host's row once, the peer kept
    plot(one, tmp_path / "hosts.png")
    assert (tmp_path / "hosts.png").stat().st_size > 0
