"""The flags every control-API command group shares (`--url`, `--admin-key`).

They are accepted both before and after the verb (`sits models --url X list` and
`sits models list --url X`). The verb-level copies default to SUPPRESS so that, when absent,
they leave the group-level value in place instead of overwriting it with a default.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable

DEFAULT_URL = "http://127.0.0.1:8080"


def add_gateway_flags(group: argparse.ArgumentParser, verbs: Iterable[argparse.ArgumentParser]) -> None:
    group.add_argument("--url", default=os.environ.get("SITS_URL", DEFAULT_URL),
                       help=f"gateway base URL (default: $SITS_URL or {DEFAULT_URL})")
    group.add_argument("--admin-key", default=None, help="admin key (default: $SITS_ADMIN_KEY)")
    for verb in verbs:
        verb.add_argument("--url", default=argparse.SUPPRESS, help="gateway base URL (as before the verb)")
        verb.add_argument("--admin-key", default=argparse.SUPPRESS, help="admin key (as before the verb)")


def admin_key(args: argparse.Namespace) -> str:
    return args.admin_key or os.environ.get("SITS_ADMIN_KEY", "")
