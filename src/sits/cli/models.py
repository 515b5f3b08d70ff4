"""`sits models ...`: the control API from the command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import aiohttp

from sits.cli.flags import add_gateway_flags, admin_key


def add_models_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    models = subparsers.add_parser("models", help="register, list, show, update and remove models at runtime")
    verbs = models.add_subparsers(dest="verb", required=True)

    register = verbs.add_parser("register", help="register a model")
    register.add_argument("name")
    register.add_argument("--endpoint", action="append", required=True, help="endpoint URL (repeatable)")
    register.add_argument("--json", dest="fields", default="{}", help="more fields as JSON, e.g. '{\"tier\": \"base\"}'")
    register.add_argument("--health-check-path")
    register.add_argument("--tier", choices=["tiny", "base", "heavy"])

    listing = verbs.add_parser("list", help="list registered models")
    show = verbs.add_parser("show", help="show one model with endpoint states")
    show.add_argument("name")
    update = verbs.add_parser("update", help="change fields of a model (PATCH)")
    update.add_argument("name")
    update.add_argument("--json", dest="fields", required=True, help="fields to change, as JSON")
    remove = verbs.add_parser("remove", help="remove a model (in-flight requests finish)")
    remove.add_argument("name")
    for verb in (register, update, remove):
        verb.add_argument("--if-match", type=int, help="only if the registry is at this version")
    add_gateway_flags(models, (register, listing, show, update, remove))
    models.set_defaults(run=run_models_command)


def run_models_command(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    headers = {"Authorization": f"Bearer {admin_key(args)}"}
    if getattr(args, "if_match", None) is not None:
        headers["If-Match"] = f'"{args.if_match}"'
    method, path, body = _request(args)
    try:
        async with aiohttp.ClientSession() as session:
            async with session.request(method, args.url.rstrip("/") + path, json=body, headers=headers) as response:
                payload = await response.json(content_type=None)
    except aiohttp.ClientError as exc:
        print(f"sits models: cannot reach {args.url}: {exc}", file=sys.stderr)
        return 1
    if response.status >= 400:
        error = payload.get("error", {}) if isinstance(payload, dict) else {}
        print(f"sits models: HTTP {response.status}: {error.get('message', payload)}", file=sys.stderr)
        return 1
    if args.verb == "list":
        for model in payload["data"]:
            states = ", ".join(f"{e['id']}={e['state']}" for e in model["endpoints"])
            print(f"{model['name']:<32} {model.get('tier') or '-':<6} {model['source']:<6} {states}")
        print(f"(registry version {payload['registry_version']})")
    else:
        print(json.dumps(payload, indent=2))
    return 0


def _request(args: argparse.Namespace) -> tuple[str, str, Any]:
    if args.verb == "register":
        try:
            fields = json.loads(args.fields)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"sits models: --json is not valid JSON: {exc}") from None
        body: dict[str, Any] = {"name": args.name, **fields}
        if len(args.endpoint) == 1:
            body["endpoint"] = args.endpoint[0]
        else:
            body["endpoints"] = [{"url": u} for u in args.endpoint]
        if args.health_check_path:
            body["health_check_path"] = args.health_check_path
        if args.tier:
            body["tier"] = args.tier
        return "POST", "/v1/models/register", body
    if args.verb == "list":
        return "GET", "/v1/registry", None
    if args.verb == "show":
        return "GET", f"/v1/models/{args.name}", None
    if args.verb == "update":
        try:
            return "PATCH", f"/v1/models/{args.name}", json.loads(args.fields)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"sits models: --json is not valid JSON: {exc}") from None
    return "DELETE", f"/v1/models/{args.name}", None
