"""ctxopt: context pruning for LLM command-line agents."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ctxopt-server")  # the one home of the version: pyproject.toml
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
