"""The fronts, thin adapters over `ctxopt.engine`: `grpc/` (the service, its
server and interceptors) and `mcp/` (the same engine as MCP tools over stdio)."""
