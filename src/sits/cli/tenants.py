"""`sits keys ...`, `sits teams ...` and `sits spend`: the tenant admin API from the command line.

    sits teams create --name Search [--id search] [--organisation acme] [--rpm N ...] [--budget-usd 50 --period monthly]
    sits keys create --team search --name indexer [--models 'gpt-*,chat'] [--priority batch] [--expires-in-s 86400]
    sits keys list [--team search] | show KEY_ID | rotate KEY_ID [--overlap-s 3600] | revoke KEY_ID
    sits spend [--group-by key|team|model|day] [--from 2026-01-01] [--to ...] [--team ...] [--key ...] [--json]

A key's secret is printed once, by `create` and `rotate`. `update` verbs take the fields to change as JSON.
`sits spend` also works with a team's own key in place of the admin key (it then shows that team only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp

from sits.cli.flags import add_gateway_flags, admin_key

MAX_ROWS = 100_000  # sits spend follows pages up to this many rows


def add_tenant_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    _add_teams(subparsers)
    _add_keys(subparsers)
    _add_spend(subparsers)


def _limit_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rpm", type=int, help="requests per minute")
    parser.add_argument("--tpm", type=int, help="tokens (input + output) per minute")
    parser.add_argument("--concurrency", type=int, help="requests in flight at once")
    parser.add_argument("--budget-usd", type=float, help="hard budget in USD per --period (429 beyond)")
    parser.add_argument("--soft-budget-usd", type=float, help="soft budget in USD per --period (alert only)")
    parser.add_argument("--period", choices=("daily", "weekly", "monthly", "total"), default="monthly")
    parser.add_argument("--metadata", action="append", default=[], metavar="K=V", help="repeatable")


def _add_teams(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    teams = subparsers.add_parser("teams", help="create, list, show, update and delete teams")
    verbs = teams.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create", help="create a team")
    create.add_argument("--name", required=True)
    create.add_argument("--id", dest="team_id", help="the team id (default: made up)")
    create.add_argument("--organisation")
    _limit_flags(create)
    listing = verbs.add_parser("list", help="list teams")
    listing.add_argument("--organisation")
    show = verbs.add_parser("show", help="show one team")
    update = verbs.add_parser("update", help="change fields of a team (PATCH)")
    update.add_argument("--json", dest="fields", required=True, help="fields to change, as JSON")
    delete = verbs.add_parser("delete", help="delete a team (refused while it has keys that are not revoked)")
    for verb in (show, update, delete):
        verb.add_argument("team_id")
    add_gateway_flags(teams, (create, listing, show, update, delete))
    teams.set_defaults(run=lambda args: asyncio.run(_run(args, "teams")))


def _add_keys(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    keys = subparsers.add_parser("keys", help="create, list, show, update, rotate and revoke API keys")
    verbs = keys.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create", help="create a key (its secret is printed once)")
    create.add_argument("--team", required=True)
    create.add_argument("--name", required=True)
    create.add_argument("--models", help="allowed models, aliases or patterns, comma-separated (default: all)")
    create.add_argument("--priority", help="admission class: realtime, interactive or batch")
    create.add_argument("--expires-in-s", type=float, help="seconds until the key stops working")
    _limit_flags(create)
    listing = verbs.add_parser("list", help="list keys")
    listing.add_argument("--team")
    show = verbs.add_parser("show", help="show one key (never its secret)")
    update = verbs.add_parser("update", help="change fields of a key (PATCH)")
    update.add_argument("--json", dest="fields", required=True, help="fields to change, as JSON")
    rotate = verbs.add_parser("rotate", help="a new secret; the old one works --overlap-s longer")
    rotate.add_argument("--overlap-s", type=float, help="default: the gateway's tenants.rotation_overlap_s")
    revoke = verbs.add_parser("revoke", help="stop every secret of the key (all replicas within tenants.refresh_s)")
    for verb in (show, update, rotate, revoke):
        verb.add_argument("key_id")
    add_gateway_flags(keys, (create, listing, show, update, rotate, revoke))
    keys.set_defaults(run=lambda args: asyncio.run(_run(args, "keys")))


def _add_spend(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    spend = subparsers.add_parser("spend", help="spend by key, team, model or day (a table, or --json)")
    spend.add_argument("--group-by", choices=("key", "team", "model", "day"), default="key")
    spend.add_argument("--from", dest="from_", metavar="YYYY-MM-DD")
    spend.add_argument("--to", metavar="YYYY-MM-DD")
    spend.add_argument("--team")
    spend.add_argument("--key")
    spend.add_argument("--json", action="store_true", help="the rows as JSON")
    add_gateway_flags(spend, ())
    spend.set_defaults(run=lambda args: asyncio.run(_spend(args)), verb="report")


class _Failed(Exception):
    pass


async def _call(session: aiohttp.ClientSession, args: argparse.Namespace, method: str, path: str,
                body: Any = None) -> Any:
    url = args.url.rstrip("/") + path
    try:
        async with session.request(method, url, json=body,
                                   headers={"Authorization": f"Bearer {admin_key(args)}"}) as response:
            answer = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise _Failed(f"cannot reach {args.url}: {exc}") from None
    if response.status >= 400:
        error = answer.get("error", {}) if isinstance(answer, dict) else {}
        raise _Failed(f"HTTP {response.status}: {error.get('message', answer)}")
    return answer


async def _run(args: argparse.Namespace, group: str) -> int:
    try:
        method, path, body = _teams_request(args) if group == "teams" else _keys_request(args)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            answer = await _call(session, args, method, path, body)
    except _Failed as exc:
        print(f"sits {group}: {exc}", file=sys.stderr)
        return 1
    if args.verb == "list":
        for item in answer["data"]:
            if group == "teams":
                print(f"{item['team_id']:<24} {item['name']:<32} {item['organisation'] or '-'}")
            else:
                print(f"{item['key_id']:<22} {item['team_id']:<20} {item['status']:<8} {item['name']}")
        return 0
    print(json.dumps(answer, indent=2))
    if "key" in answer and isinstance(answer["key"], str):
        print("the key is shown only now: store it safely", file=sys.stderr)
    return 0


def _fields(args: argparse.Namespace) -> Any:
    try:
        return json.loads(args.fields)
    except json.JSONDecodeError as exc:
        raise _Failed(f"--json is not valid JSON: {exc}") from None


def _limits_and_budget(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    limits = {k: getattr(args, k) for k in ("rpm", "tpm", "concurrency") if getattr(args, k) is not None}
    if limits:
        body["limits"] = limits
    if args.budget_usd is not None or args.soft_budget_usd is not None:
        body["budget"] = {"period": args.period, "hard_usd": args.budget_usd, "soft_usd": args.soft_budget_usd}
    if args.metadata:
        pairs = [m.partition("=") for m in args.metadata]
        if any(not sep for _, sep, _ in pairs):
            raise _Failed("--metadata takes KEY=VALUE")
        body["metadata"] = {k: v for k, _, v in pairs}
    return body


def _teams_request(args: argparse.Namespace) -> tuple[str, str, Any]:
    if args.verb == "create":
        body = {"name": args.name, **_limits_and_budget(args)}
        if args.team_id:
            body["team_id"] = args.team_id
        if args.organisation:
            body["organisation"] = args.organisation
        return "POST", "/v1/teams", body
    if args.verb == "list":
        return "GET", "/v1/teams" + (f"?{urlencode({'organisation': args.organisation})}" if args.organisation else ""), None
    path = f"/v1/teams/{quote(args.team_id, safe='')}"
    if args.verb == "show":
        return "GET", path, None
    if args.verb == "update":
        return "PATCH", path, _fields(args)
    return "DELETE", path, None


def _keys_request(args: argparse.Namespace) -> tuple[str, str, Any]:
    if args.verb == "create":
        body: dict[str, Any] = {"name": args.name, "team_id": args.team, **_limits_and_budget(args)}
        if args.models:
            body["allowed_models"] = [m.strip() for m in args.models.split(",") if m.strip()]
        if args.priority:
            body["priority"] = args.priority
        if args.expires_in_s is not None:
            body["expires_in_s"] = args.expires_in_s
        return "POST", "/v1/keys", body
    if args.verb == "list":
        return "GET", "/v1/keys" + (f"?{urlencode({'team': args.team})}" if args.team else ""), None
    path = f"/v1/keys/{quote(args.key_id, safe='')}"
    if args.verb == "show":
        return "GET", path, None
    if args.verb == "update":
        return "PATCH", path, _fields(args)
    if args.verb == "rotate":
        return "POST", path + "/rotate", {} if args.overlap_s is None else {"overlap_s": args.overlap_s}
    return "POST", path + "/revoke", None


async def _spend(args: argparse.Namespace) -> int:
    query = {k: v for k, v in (("group_by", args.group_by), ("from", args.from_), ("to", args.to),
                               ("team", args.team), ("key", args.key)) if v is not None}
    rows: list[dict[str, Any]] = []
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            cursor: str | None = None
            while len(rows) < MAX_ROWS:
                page = await _call(session, args, "GET", "/v1/spend?" + urlencode(
                    {**query, "limit": 1000, **({"cursor": cursor} if cursor else {})}))
                rows.extend(page["data"])
                cursor = page["next_cursor"]
                if cursor is None:
                    break
    except _Failed as exc:
        print(f"sits spend: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(render_spend(rows, args.group_by))
    return 0


def render_spend(rows: list[dict[str, Any]], group_by: str) -> str:
    head = f"{group_by.upper():<28} {'REQUESTS':>10} {'INPUT':>12} {'CACHED':>10} {'OUTPUT':>12} {'COST USD':>12}"
    lines = [head]
    for r in rows:
        lines.append(f"{str(r[group_by] or '-'):<28} {r['requests']:>10} {r['input_tokens']:>12} "
                     f"{r['cached_input_tokens']:>10} {r['output_tokens']:>12} {r['cost_usd']:>12.4f}")
    total = sum(r["cost_usd"] for r in rows)
    lines.append(f"{'TOTAL':<28} {sum(r['requests'] for r in rows):>10} {'':>12} {'':>10} {'':>12} {total:>12.4f}")
    return "\n".join(lines)
