"""The ledger's rows as Prometheus metrics (`/metrics` on the gateway).

The counters are the ledger's totals, not a second bookkeeping: they start from
every row the ledger holds (so they agree with `ctxopt gain` after a restart,
and fall back only when rows pass the retention, which Prometheus reads as a
counter reset) and grow with each row recorded. Labels are closed sets (hosts
and outcomes), never a session or a model.

- `ctxopt_gateway_requests_total{host,outcome}`: model calls through the gateway;
- `ctxopt_gateway_tokens_{sent,forwarded,saved}_total{host}`: their prompts, in
  ctxopt's counts (the `x-ctxopt-tokens-before/-after` headers);
- `ctxopt_gateway_added_seconds{host}`: histogram of the time the gateway added
  to a call (its preparation; the provider's time is not ctxopt's);
- `ctxopt_optimize_requests_total{outcome}` and `ctxopt_optimize_seconds`: the
  gRPC Optimize and OptimizeContext calls and their server time.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ctxopt.usage.ledger import UsageRow

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Seconds: a lean plan takes a few milliseconds, a large session's first one a second.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
TOKEN_KINDS = ("sent", "forwarded", "saved")


class _Histogram:
    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)  # per bucket, the last one +Inf
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        index = next((i for i, le in enumerate(BUCKETS) if seconds <= le), len(BUCKETS))
        self.counts[index] += 1
        self.total += seconds

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for le, count in zip([*map(str, BUCKETS), "+Inf"], self.counts, strict=True):
            running += count
            out.append((le, running))
        return out


class UsageMetrics(Collector):
    """Prometheus text for the ledger's rows (thread-safe)."""

    def __init__(self, rows: Sequence[UsageRow] = ()) -> None:
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, str]] = Counter()  # (host, outcome)
        self._tokens: dict[str, Counter[str]] = {}  # host -> sent, forwarded, saved
        self._added: dict[str, _Histogram] = {}  # host -> added time
        self._optimize: Counter[str] = Counter()  # outcome
        self._optimize_time = _Histogram()
        for row in rows:
            self.observe(row)
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(self)

    def observe(self, row: UsageRow) -> None:
        with self._lock:
            if row.front != "gateway":
                self._optimize[row.outcome] += 1
                self._optimize_time.observe(row.added_ms / 1000)
                return
            self._requests[(row.host, row.outcome)] += 1
            tokens = self._tokens.setdefault(row.host, Counter())
            tokens.update(
                sent=row.tokens_sent, forwarded=row.tokens_forwarded, saved=row.tokens_saved
            )
            self._added.setdefault(row.host, _Histogram()).observe(row.added_ms / 1000)

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self._registry)

    def describe(self) -> Iterable[Metric]:
        return []  # nothing to check at registration: the names are fixed here

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            requests = CounterMetricFamily(
                "ctxopt_gateway_requests",
                "Model calls through the gateway, by agent and outcome",
                labels=["host", "outcome"],
            )
            for (host, outcome), count in sorted(self._requests.items()):
                requests.add_metric([host, outcome], count)
            yield requests
            for kind in TOKEN_KINDS:
                family = CounterMetricFamily(
                    f"ctxopt_gateway_tokens_{kind}",
                    f"Prompt tokens {kind} by the gateway's count (x-ctxopt-tokens headers)",
                    labels=["host"],
                )
                for host, tokens in sorted(self._tokens.items()):
                    family.add_metric([host], tokens[kind])
                yield family
            added = HistogramMetricFamily(
                "ctxopt_gateway_added_seconds",
                "Time the gateway added to a model call (its preparation of the request)",
                labels=["host"],
            )
            for host, histogram in sorted(self._added.items()):
                added.add_metric([host], histogram.cumulative(), histogram.total)
            yield added
            optimize = CounterMetricFamily(
                "ctxopt_optimize_requests",
                "gRPC Optimize and OptimizeContext calls, by plan outcome",
                labels=["outcome"],
            )
            for outcome, count in sorted(self._optimize.items()):
                optimize.add_metric([outcome], count)
            yield optimize
            optimize_time = HistogramMetricFamily(
                "ctxopt_optimize_seconds", "Server time of gRPC Optimize and OptimizeContext"
            )
            optimize_time.add_metric(
                [], self._optimize_time.cumulative(), self._optimize_time.total
            )
            yield optimize_time
