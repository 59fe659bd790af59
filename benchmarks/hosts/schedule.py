"""A setting of ctxopt's collection schedule, as the server's environment sets it.

The gateway collects when a request passes `threshold_percent` of its
ceiling, down to `target_percent` (CTXOPT_GATEWAY_TRIGGER_PERCENT and
CTXOPT_GATEWAY_LANDING_PERCENT, ctxopt/api/gateway/schedule.py; the server's
defaults when unset). A third number turns generational collections on
(CTXOPT_GATEWAY_GENERATIONS, ctxopt/api/gateway/generations.py): minor
collections land at the target, full ones at `full_percent`; two numbers
turn them off; a last `+R` keeps the latest turns whole up to R% of the room
a landing leaves (CTXOPT_GATEWAY_RECENT_SHARE, generations.py `latest_start`;
without it: the server's default), and a last `@K` the latest K turns whole
whatever their size (CTXOPT_GATEWAY_RECENT_TURNS; without it: the server's
default). The Pareto curve of the benchmark is ctxopt
over several settings. A new schedule knob (one that decides when and how deep to collect
from the provider's prices) joins as a field here, its variable in `env`, and
its spelling in `parse`.

>>> Schedule.parse("95/35").env()  # doctest: +NORMALIZE_WHITESPACE
{'CTXOPT_GATEWAY_TRIGGER_PERCENT': '95', 'CTXOPT_GATEWAY_LANDING_PERCENT': '35',
 'CTXOPT_GATEWAY_GENERATIONS': 'off'}
>>> Schedule.parse("80/50/30").env()["CTXOPT_GATEWAY_FULL_LANDING_PERCENT"]
'30'
>>> Schedule.parse("95/50/30+70").env()["CTXOPT_GATEWAY_RECENT_SHARE"]
'0.7'
>>> Schedule.parse("95/50/30+70").label
'95/50/30+70'
>>> Schedule.parse("95/30/10+70@4").env()["CTXOPT_GATEWAY_RECENT_TURNS"]
'4'
>>> Schedule.parse("95/30/10+70@4").label
'95/30/10+70@4'
>>> Schedule().label
'default'
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Schedule:
    threshold_percent: float | None = None  # None: the server's default
    target_percent: float | None = None
    full_percent: float | None = None  # generations on, full collections land here
    recent_percent: float | None = None  # None: the server's default
    recent_turns: int | None = None  # None: the server's default

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """`THRESHOLD/TARGET[/FULL][+RECENT][@TURNS]` in percent (TURNS a count), e.g.
        95/35, 80/50/30, 95/50/30+70 or 95/30/10+70@4."""
        spec, _, turns_text = text.partition("@")
        shares, _, recent_text = spec.partition("+")
        try:
            numbers = [float(part) for part in shares.split("/")]
            recent = float(recent_text) if recent_text else None
            turns = int(turns_text) if turns_text else None
        except ValueError:
            numbers, recent, turns = [], None, None
        if len(numbers) not in (2, 3):
            raise ValueError(
                f"schedule {text!r}: expected THRESHOLD/TARGET[/FULL], e.g. 95/35 or 80/50/30"
            )
        threshold, target = numbers[:2]
        full = numbers[2] if len(numbers) == 3 else None
        if not 0 < target < threshold <= 100:
            raise ValueError(f"schedule {text!r}: expected 0 < target < threshold <= 100")
        if full is not None and not 0 < full <= target:
            raise ValueError(f"schedule {text!r}: expected 0 < full <= target")
        if recent is not None and not 0 <= recent <= 100:
            raise ValueError(f"schedule {text!r}: expected 0 <= recent <= 100")
        if turns is not None and turns < 0:
            raise ValueError(f"schedule {text!r}: expected @TURNS >= 0")
        return cls(threshold, target, full, recent, turns)

    @property
    def label(self) -> str:
        if self.threshold_percent is None or self.target_percent is None:
            return "default"
        label = f"{self.threshold_percent:g}/{self.target_percent:g}"
        if self.full_percent is not None:
            label += f"/{self.full_percent:g}"
        if self.recent_percent is not None:
            label += f"+{self.recent_percent:g}"
        return label if self.recent_turns is None else f"{label}@{self.recent_turns}"

    def env(self) -> dict[str, str]:
        """The server's environment for this setting (empty: its defaults)."""
        if self.threshold_percent is None or self.target_percent is None:
            return {}
        env = {
            "CTXOPT_GATEWAY_TRIGGER_PERCENT": f"{self.threshold_percent:g}",
            "CTXOPT_GATEWAY_LANDING_PERCENT": f"{self.target_percent:g}",
            "CTXOPT_GATEWAY_GENERATIONS": "off" if self.full_percent is None else "on",
        }
        if self.full_percent is not None:
            env["CTXOPT_GATEWAY_FULL_LANDING_PERCENT"] = f"{self.full_percent:g}"
        if self.recent_percent is not None:
            env["CTXOPT_GATEWAY_RECENT_SHARE"] = f"{self.recent_percent / 100:g}"
        if self.recent_turns is not None:
            env["CTXOPT_GATEWAY_RECENT_TURNS"] = str(self.recent_turns)
        return env
