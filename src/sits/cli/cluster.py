"""`sits cluster status` and `sits cluster switch`: the cluster API from the command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any
from urllib.parse import quote

import aiohttp

from sits.cli.flags import add_gateway_flags, admin_key


def add_cluster_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    cluster = subparsers.add_parser("cluster", help="replicas, state hashes, sync lag; switch aliases")
    verbs = cluster.add_subparsers(dest="verb", required=True)
    status = verbs.add_parser("status", help="this replica's view of the cluster and of every alias switch")
    status.add_argument("--json", action="store_true", help="print the raw GET /v1/cluster answer")
    switch = verbs.add_parser("switch", help="point an alias at another model on every replica")
    switch.add_argument("alias")
    switch.add_argument("to", help="the model, e.g. chat@v2")
    switch.add_argument("--canary-weight", type=float, default=None, help="share of new requests, e.g. 0.1")
    add_gateway_flags(cluster, (status, switch))
    cluster.set_defaults(run=run_cluster_command)


def run_cluster_command(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    url = args.url.rstrip("/")
    key = admin_key(args)
    if args.verb == "status":
        method, path, body = "GET", "/v1/cluster", None
    else:
        payload: dict[str, Any] = {"to": args.to}
        if args.canary_weight is not None:
            payload["canary_weight"] = args.canary_weight
        method, path, body = "POST", f"/v1/aliases/{quote(args.alias, safe='')}/switch", payload
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            async with session.request(method, url + path, json=body,
                                       headers={"Authorization": f"Bearer {key}"}) as response:
                answer = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        print(f"sits cluster: cannot reach {url}: {exc}", file=sys.stderr)
        return 1
    if response.status >= 400:
        error = answer.get("error", {}) if isinstance(answer, dict) else {}
        print(f"sits cluster: HTTP {response.status}: {error.get('message', answer)}", file=sys.stderr)
        return 1
    if args.verb == "status" and not args.json:
        print(render_status(answer))
    else:
        print(json.dumps(answer, indent=2))
    return 0


def render_status(status: dict[str, Any]) -> str:
    """The GET /v1/cluster answer as a short table."""
    lines = [f"replica {status['replica_id']}  state {status['state_hash']}  "
             f"{'converged' if status['converged'] else 'NOT converged'}  "
             f"served {status['served']['total']}"]
    for name, transport in status["transports"].items():
        since = transport.get("last_sync_s")
        detail = (f"connected={transport['connected']}" if "connected" in transport
                  else "peers " + ", ".join(f"{p}={'up' if ok else 'down'}" for p, ok in transport["peers"].items()))
        lines.append(f"  {name}: {detail}; last sync {'never' if since is None else f'{since:.1f}s ago'}")
    lines.append(f"  {'REPLICA':<24} {'LIVE':<5} {'STATE':<17} {'SYNC':<5} {'HEARD':>8} {'LAG':>8}")
    for r in status["replicas"]:
        heard = "-" if r["last_heard_s"] is None else f"{r['last_heard_s']:.1f}s"
        lag = "-" if r["lag_ms"] is None else f"{r['lag_ms']}ms"
        name = r["id"] + (" *" if r["self"] else "")
        lines.append(f"  {name:<24} {'yes' if r['live'] else 'no':<5} {r['state_hash']:<17} "
                     f"{'yes' if r['in_sync'] else 'no':<5} {heard:>8} {lag:>8}")
    if status["aliases"]:
        lines.append(f"  {'ALIAS':<24} {'TARGET':<24} {'PREVIOUS':<24} {'EPOCH':>5}  PHASE")
        for a in status["aliases"]:
            target = a["target"] + (f" ({a['canary_weight']:.0%})" if a["phase"] == "canary" else "")
            lines.append(f"  {a['alias']:<24} {target:<24} {a['previous'] or '-':<24} {a['epoch']:>5}  {a['phase']}")
    return "\n".join(lines)
