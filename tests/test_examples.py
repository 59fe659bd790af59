"""The `>>>` examples in the public engine entry points run and hold."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest
from ctxopt.engine import engine
from ctxopt.planner import plan
from ctxopt.text import lines


@pytest.mark.parametrize("module", [engine, plan, lines], ids=lambda m: m.__name__)
def test_examples_in_docstrings_hold(module: ModuleType) -> None:
    result = doctest.testmod(module, raise_on_error=True)
    assert result.attempted > 0
