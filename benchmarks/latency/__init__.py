"""Latency and scaling of every front: in-process, Python gRPC, TypeScript client."""
