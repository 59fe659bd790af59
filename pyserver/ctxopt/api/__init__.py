"""The fronts, thin adapters over `ctxopt.engine`: `grpc/` (the service, its
server and interceptors), `mcp/` (the same engine as MCP tools), `gateway/`
(model-API requests pruned on their way up) and `auth` (the bearer tokens gRPC
and the gateway share)."""
