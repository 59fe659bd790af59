"""The MCP front: the engine's garbage collector as tools, over stdio."""
