"""ctxopt: context pruning for LLM command-line agents."""

__version__ = "0.1.0"
