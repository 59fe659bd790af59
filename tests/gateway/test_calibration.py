"""The usage calibration in-process: a provider that counts a prompt larger
than our tokenizer does shrinks the ceiling later calls are judged against
(`Pipeline.report_usage`), up to MAX_TOKEN_SCALE; beyond it a report is taken
for an accounting error and ignored."""

from __future__ import annotations

import json

import pytest
from ctxopt.api.gateway.app import wire_format
from ctxopt.api.gateway.pipeline import Pipeline
from ctxopt.api.gateway.prepared import Outcome, Prepared
from ctxopt.api.gateway.state import MAX_TOKEN_SCALE
from ctxopt.config import Config
from ctxopt.model import DEFAULT_THRESHOLD_PERCENT

from tests.factory import engine
from tests.gateway.test_http import HELLO, long_history

PATH = "v1/messages"
RAW = json.dumps(HELLO | {"messages": long_history(12, 60)}).encode()
# the window puts the prompt at this share of the collection threshold, by our count
SHARE_OF_THRESHOLD = 0.8


def prepare(pipeline: Pipeline, session: str, window: int) -> Prepared:
    fmt = wire_format("anthropic", PATH)
    assert fmt is not None
    headers = {"x-ctxopt-session": session, "x-ctxopt-window-tokens": str(window)}
    return pipeline.prepare(fmt, PATH, RAW, headers, "")


@pytest.fixture
def pipeline_and_window() -> tuple[Pipeline, int]:
    pipeline = Pipeline(engine(), Config(data_dir=":memory:"))
    tokens = prepare(pipeline, "probe", 10_000_000).tokens_before
    window = int(tokens / (DEFAULT_THRESHOLD_PERCENT / 100) / SHARE_OF_THRESHOLD)
    return pipeline, window


@pytest.mark.parametrize(
    ("provider_ratio", "expected"),
    [
        (1.0, Outcome.BELOW_THRESHOLD),  # the provider counts as we do
        (1.5, Outcome.OPTIMIZED),  # 0.8 x 1.5 of the threshold: a collection runs
        (MAX_TOKEN_SCALE + 0.5, Outcome.BELOW_THRESHOLD),  # taken for an accounting error
    ],
)
def test_the_providers_count_scales_the_ceiling_of_the_next_call(
    pipeline_and_window: tuple[Pipeline, int], provider_ratio: float, expected: Outcome
) -> None:
    pipeline, window = pipeline_and_window
    first = prepare(pipeline, "calibrated", window)
    assert first.outcome == Outcome.BELOW_THRESHOLD and first.state is not None
    pipeline.report_usage(first.state, int(first.tokens_after * provider_ratio))
    assert prepare(pipeline, "calibrated", window).outcome == expected
