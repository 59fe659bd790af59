"""A setting of ctxopt's collection schedule, as the server's environment sets it.

The gateway collects when a request passes `threshold_percent` of its
ceiling, down to `target_percent` (CTXOPT_GATEWAY_TRIGGER_PERCENT and
CTXOPT_GATEWAY_LANDING_PERCENT, ctxopt/api/gateway/schedule.py; the server's
defaults when unset). The Pareto
curve of the benchmark is ctxopt over several settings. A new schedule knob
(one that decides when and how deep to collect from the provider's prices)
joins as a field here, its variable in `env`, and its spelling in `parse`.

>>> Schedule.parse("95/35").env()
{'CTXOPT_GATEWAY_TRIGGER_PERCENT': '95', 'CTXOPT_GATEWAY_LANDING_PERCENT': '35'}
>>> Schedule().label
'default'
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Schedule:
    threshold_percent: float | None = None  # None: the server's default
    target_percent: float | None = None

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """`THRESHOLD/TARGET` in percent of the ceiling, e.g. 95/35."""
        try:
            threshold, target = (float(part) for part in text.split("/"))
        except ValueError:
            raise ValueError(f"schedule {text!r}: expected THRESHOLD/TARGET, e.g. 95/35") from None
        if not 0 < target < threshold <= 100:
            raise ValueError(f"schedule {text!r}: expected 0 < target < threshold <= 100")
        return cls(threshold, target)

    @property
    def label(self) -> str:
        if self.threshold_percent is None or self.target_percent is None:
            return "default"
        return f"{self.threshold_percent:g}/{self.target_percent:g}"

    def env(self) -> dict[str, str]:
        """The server's environment for this setting (empty: its defaults)."""
        if self.threshold_percent is None or self.target_percent is None:
            return {}
        return {
            "CTXOPT_GATEWAY_TRIGGER_PERCENT": f"{self.threshold_percent:g}",
            "CTXOPT_GATEWAY_LANDING_PERCENT": f"{self.target_percent:g}",
        }
