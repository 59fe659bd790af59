"""The command line, top down:

- `commands`: `ctxopt` and its subcommands (`main`, the console script).
- `client`: the subcommands that ask a running server.
- `preflight`: start-up checks, run before the slow imports.
- `logs`: one format for every line the server writes to stderr.
- `launch`: `ctxopt run HOST`, an agent CLI pointed at the gateway.
"""

from ctxopt.cli.commands import main

__all__ = ["main"]
