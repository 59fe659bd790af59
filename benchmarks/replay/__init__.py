"""Session replay: every model call of recorded agent sessions, per method:
prompt tokens, the cacheable prefix, billed input, needed-later recall and
added latency (`scripts/replay.sh`, entry point `python -m benchmarks.replay`)."""
