"""Server configuration: every knob, its default, and its `CTXOPT_*` variable.

`Config.from_env()` reads the environment; command-line flags override it.
The README's flag table lists the same names and defaults.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from ctxopt.errors import InvalidArgument
from ctxopt.model import DEFAULT_PRESSURE_PERCENT, DEFAULT_TARGET_PERCENT, DEFAULT_THRESHOLD_PERCENT
from ctxopt.planner import knobs

Tokenizer = Literal["cl100k", "gemini"]
LogFormat = Literal["json", "text"]
# on: prune; shadow: plan and log, forward the original; off: forward as sent
GatewayMode = Literal["on", "shadow", "off"]
GATEWAY_MODES: tuple[GatewayMode, ...] = ("on", "shadow", "off")


def default_data_dir() -> str:
    """Per-user data directory: $XDG_DATA_HOME/ctxopt or ~/.local/share/ctxopt."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "ctxopt")


@dataclass(frozen=True, slots=True)
class Config:
    # Transport
    addr: str = "127.0.0.1:50051"
    workers: int = 16
    max_message_bytes: int = 64 * 1024 * 1024
    grace_seconds: float = 5.0  # in-flight calls get this long to finish on shutdown
    drain_notice_seconds: float = 0.5  # NOT_SERVING this long before refusing calls
    auth_token: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    insecure: bool = False
    # The MCP tools over streamable HTTP in the same process, sharing sessions and
    # stash with gRPC clients (a Gemini CLI adapter and its agent); "" is off
    mcp_addr: str = ""
    # stderr: one JSON object per line, or plain lines (every library's too)
    log_format: LogFormat = "json"
    # The model-API gateway over HTTP in the same process ("" is off), the
    # providers it forwards to (base URLs without a version path), the window
    # for every request (0: the model table's) and whether a recognised agent's
    # own compaction line caps the prompt (api/gateway/hosts.py); `gateway_mode`
    # "shadow" plans and logs but forwards the original, "off" forwards as sent
    gateway_addr: str = ""
    gateway_mode: GatewayMode = "on"
    upstream_anthropic: str = "https://api.anthropic.com"
    upstream_openai: str = "https://api.openai.com"
    upstream_gemini: str = "https://generativelanguage.googleapis.com"
    gateway_window_tokens: int = 0
    gateway_host_ceilings: bool = True
    # When the gateway collects (api/gateway/schedule.py): once the next call would
    # reach `gateway_trigger_percent` of the ceiling, landing at `gateway_landing_percent`
    # (or lower where only that pays for the rewrite at the provider's cache prices);
    # answered tool outputs shrink once to at most `gateway_arrival_share` of their
    # size (api/gateway/arrivals.py; 0: off)
    # 95/40 with generations (full collections at 20), the latest turns whole up to 0.7 of
    # the room: chosen by `python -m benchmarks.hosts.cv --gemini-threshold 0.9` over 13
    # settings (landings 20-70, shares 0-1, triggers 90-95) on all 5 folds of 30
    # development trajectories and 5 long sessions together (docs/agents.md)
    gateway_trigger_percent: float = 95.0
    gateway_landing_percent: float = 40.0
    gateway_arrival_share: float = 0.0
    # Generational collections (api/gateway/generations.py): a collection first prunes
    # only the turns since the last full one, landing at `gateway_landing_percent`, and
    # leaves the older prefix (and the provider's cache of it) byte-identical; a full
    # one, when that cannot land, goes down to `gateway_full_landing_percent`
    gateway_generations: bool = True
    gateway_full_landing_percent: float = 20.0
    # Either collection keeps the latest turns whole up to this share of the room its
    # landing leaves above the frame and the task (generations.py `latest_roots`), and
    # the latest `gateway_recent_turns` turns whole whatever their size: a count of the
    # agent's steps, not a share, so a small window keeps its last steps as a large one does
    gateway_recent_share: float = 0.7
    gateway_recent_turns: int = 2
    # How long a request waits for the engine (sync, plan) before it goes up as the
    # original, or locally truncated when that does not fit; 0 waits as long as it
    # takes. Far above a plan's p99 under load (0.7 s on 2 shared cores, docs/gateway.md)
    # and far below a model's answer, so only a stuck or starved engine reaches it.
    gateway_engine_deadline_ms: int = 5000
    # Storage
    data_dir: str = ""  # empty: default_data_dir(); ":memory:" for tests only
    fsync: Literal["full", "normal"] = "normal"
    stash_max_entries: int = 100_000
    stash_max_bytes: int = 1024 * 1024 * 1024
    # Days the usage ledger keeps a call's row (`ctxopt gain`, the dashboard): a
    # quarter covers the monthly and weekly views people compare
    usage_retention_days: int = 90
    # Limits on input
    max_text_chars: int = 2_000_000
    max_chunks_per_request: int = 20_000
    max_chunks_per_session: int = 200_000
    max_sessions: int = 10_000
    max_query_chars: int = 100_000
    max_embedding_dim: int = 8192
    # Token counting
    tokenizer: Tokenizer = "cl100k"
    token_cache_size: int = 200_000
    # GC defaults (percent of the context window)
    gc_threshold_percent: float = DEFAULT_THRESHOLD_PERCENT
    gc_target_percent: float = DEFAULT_TARGET_PERCENT
    gc_pressure_percent: float = DEFAULT_PRESSURE_PERCENT
    # Scoring and planning (their defaults and why: planner/knobs.py)
    recency_half_life_turns: float = knobs.RECENCY_HALF_LIFE_TURNS
    neighbour_share: float = knobs.NEIGHBOUR_SHARE
    old_generation_after: int = knobs.OLD_GENERATION_AFTER
    incremental_batch: int = knobs.INCREMENTAL_BATCH

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Config:
        """Read `CTXOPT_<FIELD>` for every field (e.g. CTXOPT_DATA_DIR)."""
        env = os.environ if environ is None else environ
        updates: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"CTXOPT_{f.name.upper()}")
            if raw is None:
                continue
            updates[f.name] = _parse(f.name, raw, getattr(cls(), f.name))
        return replace(cls(), **updates)

    @property
    def resolved_data_dir(self) -> str:
        return self.data_dir or default_data_dir()


_EXPECTED = {bool: "true or false", int: "a whole number", float: "a number"}


def _parse(name: str, raw: str, default: object) -> object:
    try:
        if isinstance(default, bool):
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(raw)
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError:
        expected = _EXPECTED[type(default)]
        raise InvalidArgument(f"CTXOPT_{name.upper()}", raw, f"expected {expected}") from None
    return raw
