"""The `sits` command line: serve, chat, models, cluster, intent, router, simulate."""

from sits.cli.main import main

__all__ = ["main"]
