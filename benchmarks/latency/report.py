"""What a run shows: the rows, the tables, the fitted growth, the issue's
targets met or not, and the log-log plot against the design target."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.latency.server import Latency, ServerRun

FRONTS = ("in_process", "grpc", "typescript")
CALLS = ("score", "optimize")
GROWTH_FROM = 1_000  # below this the fixed per-call cost dominates the fit
DESIGN_MS_PER_CHUNK = 0.05  # the original design target: 50 ms per 1,000 chunks


@dataclass
class Row:
    chunks: int
    repeats: int
    append_tokens_per_s_in_process: float
    in_process: dict[str, Latency]
    server: ServerRun

    @property
    def tokens(self) -> int:
        return self.server.tokens

    def front(self, name: str) -> dict[str, Latency]:
        if name == "in_process":
            return self.in_process
        return self.server.grpc if name == "grpc" else self.server.typescript

    @property
    def rss_mb_per_million_tokens(self) -> float:
        return self.server.rss_loaded_mb / (self.tokens / 1e6)

    @property
    def held_mb_per_million_tokens(self) -> float:
        """RSS added by the session over the SERVING baseline, per million tokens."""
        return (self.server.rss_loaded_mb - self.server.rss_serving_mb) / (self.tokens / 1e6)


@dataclass
class Target:
    what: str
    measured_ms: float
    limit_ms: float

    @property
    def met(self) -> bool:
        return self.measured_ms <= self.limit_ms


def fitted_sizes(sizes: list[int]) -> list[int]:
    """The sizes the growth is fitted over: from GROWTH_FROM up, or all when fewer than two are."""
    large = [n for n in sizes if n >= GROWTH_FROM]
    return large if len(large) >= 2 else sizes


def growth_exponent(sizes: list[int], ms: list[float]) -> float:
    """Least-squares slope of log(ms) against log(chunks) over `fitted_sizes`."""
    fit = fitted_sizes(sizes)
    points = [(n, t) for n, t in zip(sizes, ms, strict=True) if n in fit]
    if len(points) < 2:
        return math.nan
    x, y = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    return float(np.polyfit(x, y, 1)[0])


def growth(rows: list[Row]) -> dict[str, float]:
    """Fitted exponent of every front and call, and n log n's over the same sizes."""
    sizes = [r.chunks for r in rows]
    fitted = {
        f"{call}_{front}": growth_exponent(sizes, [r.front(front)[call]["p50_ms"] for r in rows])
        for call in CALLS
        for front in FRONTS
    }
    fitted["n_log_n"] = growth_exponent(sizes, [n * math.log(n) for n in sizes])
    return fitted


def targets(rows: list[Row]) -> list[Target]:
    """Issue 7's latency targets, for the sizes this run measured."""
    by_size = {r.chunks: r for r in rows}
    out = []
    if 1_000 in by_size:
        r = by_size[1_000]
        out.append(
            Target(
                "Optimize p50, 1,000 chunks, Python gRPC", r.server.grpc["optimize"]["p50_ms"], 3.0
            )
        )
        out.append(
            Target(
                "Optimize p50, 1,000 chunks, TS client",
                r.server.typescript["optimize"]["p50_ms"],
                5.0,
            )
        )
    if 100_000 in by_size:
        r = by_size[100_000]
        out.append(
            Target(
                "Optimize p50, 100,000 chunks, Python gRPC",
                r.server.grpc["optimize"]["p50_ms"],
                200.0,
            )
        )
        out.append(
            Target(
                "Optimize p50, 100,000 chunks, TS client",
                r.server.typescript["optimize"]["p50_ms"],
                200.0,
            )
        )
    for r in rows:
        design = DESIGN_MS_PER_CHUNK * r.chunks
        out.append(
            Target(
                f"Optimize p50, {r.chunks:,} chunks, TS client (design 0.05 ms/chunk)",
                r.server.typescript["optimize"]["p50_ms"],
                design,
            )
        )
    return out


def _fronts(row: Row, call: str, stat: str) -> str:
    return "/".join(_ms(row.front(front)[call][stat]) for front in FRONTS)


def _ms(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def print_tables(rows: list[Row], fitted: dict[str, float], checked: list[Target]) -> None:
    print("latency, ms: in-process / Python gRPC / TypeScript client")
    print(
        f"{'chunks':>7} {'repeats':>7} {'Score p50':>18} {'Score p99':>18} "
        f"{'Optimize p50':>18} {'Optimize p99':>18}"
    )
    for r in rows:
        print(
            f"{r.chunks:>7,} {r.repeats:>7} {_fronts(r, 'score', 'p50_ms'):>18} "
            f"{_fronts(r, 'score', 'p99_ms'):>18} {_fronts(r, 'optimize', 'p50_ms'):>18} "
            f"{_fronts(r, 'optimize', 'p99_ms'):>18}"
        )
    print("(fewer repeats at larger sizes; a p99 of fewer than 100 samples is their maximum)")
    print()
    print(
        f"{'chunks':>7} {'tokens':>11} {'append tok/s':>21} {'SearchStash ms':>14} "
        f"{'RSS':>6} {'RSS/Mtok':>8} {'held/Mtok':>9} {'cold start':>10} {'restart':>7} "
        f"{'1st Optimize':>12}"
    )
    print(
        f"{'':>7} {'':>11} {'in-process / gRPC':>21} {'p50 / p99':>14} {'MB':>6} {'MB':>8} "
        f"{'MB':>9} {'ms':>10} {'ms':>7} {'ms':>12}"
    )
    for r in rows:
        s = r.server
        append = (
            f"{r.append_tokens_per_s_in_process / 1e6:.2f}M / {s.append_tokens_per_s / 1e6:.2f}M"
        )
        search = f"{_ms(s.stash_search['p50_ms'])} / {_ms(s.stash_search['p99_ms'])}"
        print(
            f"{r.chunks:>7,} {r.tokens:>11,} {append:>21} {search:>14} {s.rss_loaded_mb:>6.0f} "
            f"{r.rss_mb_per_million_tokens:>8,.0f} {r.held_mb_per_million_tokens:>9,.0f} "
            f"{s.cold_start_ms:>10.0f} {s.restart_ms:>7.0f} "
            f"{s.first_optimize_after_restart_ms:>12,.0f}"
        )
    print(
        "(held/Mtok: RSS added by the session over the SERVING baseline; restart: to SERVING "
        "on the data directory holding the session, which loads on its first call)"
    )
    print()
    reference = fitted["n_log_n"]
    fit = fitted_sizes([r.chunks for r in rows])
    if math.isnan(reference):
        print("growth: not fitted (it needs two sizes)")
    else:
        print_growth(fitted, fit)
    print()
    print("targets:")
    for t in checked:
        state = "met" if t.met else "NOT MET"
        print(f"  {t.what:62} {_ms(t.measured_ms):>7} ms (<= {_ms(t.limit_ms)}): {state}")


def print_growth(fitted: dict[str, float], fit: list[int]) -> None:
    reference = fitted["n_log_n"]
    print(
        f"growth, log-log slope of p50 over {fit[0]:,}..{fit[-1]:,} chunks "
        f"(n log n over the same sizes: n^{reference:.2f}):"
    )
    for call in CALLS:
        verdicts = ", ".join(
            f"{front} n^{fitted[f'{call}_{front}']:.2f} "
            + ("(no faster)" if fitted[f"{call}_{front}"] <= reference else "(FASTER)")
            for front in FRONTS
        )
        print(f"  {call:9} {verdicts}")
    print("  (in-process is the engine's own cost; the clients add a fixed cost per call)")


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r.chunks for r in rows]
    labels = {"in_process": "in-process", "grpc": "Python gRPC", "typescript": "TS client"}
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for color, (front, label) in enumerate(labels.items()):
        for call, style in (("optimize", "o-"), ("score", "s:")):
            ax.loglog(
                sizes,
                [r.front(front)[call]["p50_ms"] for r in rows],
                style,
                color=f"C{color}",
                label=f"{call.capitalize()} {label}",
            )
    ax.loglog(
        sizes,
        [r.server.stash_search["p50_ms"] for r in rows],
        "^-.",
        color="C3",
        label="SearchStash gRPC",
    )
    ax.loglog(
        sizes,
        [DESIGN_MS_PER_CHUNK * n for n in sizes],
        "k--",
        linewidth=2,
        label="design target: 50 ms per 1,000 chunks",
    )
    ax.set_xlabel("chunks in session")
    ax.set_ylabel("p50 milliseconds")
    ax.set_title("ctxopt latency against session size")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
