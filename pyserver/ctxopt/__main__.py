"""`python -m ctxopt` is the `ctxopt` command."""

import sys

from ctxopt.cli import main

sys.exit(main())
