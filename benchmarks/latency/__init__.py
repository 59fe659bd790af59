"""Latency and scaling of every front (in-process, Python gRPC, TypeScript
client) from 100 to 100,000 chunks; run it with `python -m benchmarks.latency`."""
