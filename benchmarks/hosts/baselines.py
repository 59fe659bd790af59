"""Each host alone: the prompts it sends when nothing stands between it and the provider.

Claude Code and Codex send the whole history until the prompt they are about
to send reaches their compaction line. Both judge it by the size the provider
reported for the last call plus their estimate of what was added since (the
raw growth of the history): alone, that is the size of the next prompt;
behind a proxy that shrinks requests (context editing at the provider,
headroom), it is the shrunk size plus what is new. Then one summarising call
sends that history to the model (with the host's own compaction prompt and
body changes when the case has a recorded frame), and the history is
replaced by its summary:

- Claude Code keeps its frame items and the summary (as a user message);
- Codex keeps the user messages (its frame items and the task: the
  trajectories hold no other) followed by the summary.

The summary an LLM would write is a fixed placeholder of SUMMARY_CHARS
characters (as the session replay's gemini-cli-native leg), so it holds none
of the needed lines a real summary might keep. The summarising call's input
is what it sends; its output is billed by the legs (benchmarks/hosts/legs.py).
With Anthropic context editing on (`edit`), the provider clears old tool
results of every request past its trigger.

Gemini CLI alone is the session replay's gemini-cli-native leg
(benchmarks/replay/replay.mjs): @google/gemini-cli-core's own compression and
tool-output masking.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from benchmarks.gateway.billing import EDIT_TRIGGER_TOKENS, context_edited
from benchmarks.gateway.histories import JsonObject
from benchmarks.gateway.latency import LISTS
from benchmarks.hosts.prompts import Case, rendered
from benchmarks.replay.node import SUMMARY_TEXT
from benchmarks.replay.sessions import Prompt

Size = Callable[[Prompt], int]
Edit = Callable[[JsonObject], JsonObject]
Send = Callable[[JsonObject, int], Prompt]  # a body and its call's index -> what the provider got


@dataclass(frozen=True, slots=True)
class Compacting:
    """A host that summarises its history at `line` tokens."""

    line: int
    keep_task: bool  # Codex: the user messages stay beside the summary
    edit: Edit | None = None  # what the provider does to each request (context editing)


@dataclass(slots=True)
class HostPrompts:
    """What the host sent for one trajectory, in order: the prompt of each
    call, and before which calls it sent a summarising call (with that call's
    prompt)."""

    calls: list[Prompt] = field(default_factory=list)
    summarising: dict[int, Prompt] = field(default_factory=dict)


def summary_message(fmt: str, text: str) -> JsonObject:
    if fmt == "openai-responses":
        return {"role": "user", "content": [{"type": "input_text", "text": text}]}
    return {"role": "user", "content": text}


def summary_text(compaction: int) -> str:
    """A distinct placeholder per compaction, so no two summaries share a cache prefix."""
    return f"Summary {compaction} of the conversation so far.\n{SUMMARY_TEXT}"


def compacting(case: Case, host: Compacting, size: Size, send: Send | None = None) -> HostPrompts:
    """The prompts of a host that compacts once its estimate of the next
    prompt reaches its line. `send` delivers a body (default: straight to the
    provider, edited when `host.edit`)."""
    key = LISTS[case.fmt]
    deliver = send or (lambda body, _call: _provider_sees(case, body, host.edit))
    compaction = case.frame.compaction if case.frame is not None else None
    framing = case.frame.frame_items if case.frame is not None else ()
    sent = HostPrompts()
    kept: list[JsonObject] = []  # what stands for the summarised history
    summarised = 0  # how many items of the full history it stands for
    reported = raw_before = 0  # the last call's size at the provider, and as the host sent it
    for k in range(case.calls):
        full = case.body(k)
        body = {**full, key: kept + full[key][summarised:]}
        raw = size(rendered(case, body))
        if reported + raw - raw_before >= host.line and len(full[key]) > summarised + 1:
            asked = body if compaction is None else compaction.request(case.fmt, body)
            sent.summarising[k] = deliver(asked, k)
            lead = full[key][: case.lead]
            own = lead if host.keep_task else [i for i in lead if i in framing]
            kept = [*own, summary_message(case.fmt, summary_text(len(sent.summarising)))]
            summarised = len(full[key])
            body = {**full, key: kept}
            raw = size(rendered(case, body))
        prompt = deliver(body, k)
        sent.calls.append(prompt)
        reported, raw_before = size(prompt), raw
    return sent


def _provider_sees(case: Case, body: JsonObject, edit: Edit | None) -> Prompt:
    return rendered(case, body if edit is None else edit(body))


def context_editing(window: int, claude_window: int) -> Edit:
    """Anthropic's clear_tool_uses edit with its trigger (100,000 tokens of a
    200,000-token model) scaled to `window` by the same proportion."""
    trigger = EDIT_TRIGGER_TOKENS * window // claude_window
    return lambda body: context_edited(body, trigger)
