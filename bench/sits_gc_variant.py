"""Diagnostic only: run `sits` with the cyclic GC tuned, to measure what GC costs SITS.

Not the product and not a recommendation of these exact numbers: it imports SITS's modules,
moves everything allocated so far into the permanent generation (gc.freeze) and raises the
collection thresholds, then runs the normal CLI. The `sits-gc` target of
run_gateway_bench.py starts SITS this way, with the same arguments as the `sits` target.
"""

from __future__ import annotations

import gc
import importlib
import sys

for name in ("sits.cli", "sits.serve", "sits.app"):
    try:
        importlib.import_module(name)
    except ImportError:
        pass
gc.collect()
gc.freeze()
gc.set_threshold(50_000, 50, 1000)

from sits.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
