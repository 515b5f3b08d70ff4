"""`sits models ...` against a running gateway."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from tests.api.test_control_api import ADMIN, control_config
from tests.conftest import base_url


async def sits_models(gateway, *args: str, key: str = "admin-secret") -> tuple[int, str, str]:
    return await sits(key, "models", "--url", base_url(gateway), *args)


async def sits(key: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sits", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "SITS_ADMIN_KEY": key},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_register_list_show_update_remove(upstream, start_gateway):
    gateway = await start_gateway(control_config(upstream.url), secrets=ADMIN)
    code, out, err = await sits_models(gateway, "register", "cli-model", "--endpoint", upstream.url,
                                       "--tier", "base", "--json", '{"capabilities": ["json"]}')
    assert code == 0, err
    assert json.loads(out)["registry_version"] == 1
    code, out, _ = await sits_models(gateway, "list")
    assert code == 0 and "cli-model" in out and "static" in out
    code, out, _ = await sits_models(gateway, "update", "cli-model", "--json", '{"tier": "heavy"}', "--if-match", "1")
    assert code == 0 and json.loads(out)["tier"] == "heavy"
    code, out, _ = await sits_models(gateway, "show", "cli-model")
    assert json.loads(out)["capabilities"] == ["json"]
    code, _, err = await sits_models(gateway, "remove", "cli-model", "--if-match", "1")
    assert code == 1 and "412" in err  # stale version: refused, nothing removed
    code, _, _ = await sits_models(gateway, "remove", "cli-model")
    assert code == 0
    code, _, err = await sits_models(gateway, "show", "cli-model")
    assert code == 1 and "404" in err


async def test_wrong_admin_key_is_refused(upstream, start_gateway):
    gateway = await start_gateway(control_config(upstream.url), secrets=ADMIN)
    code, _, err = await sits_models(gateway, "list", key="nope")
    assert code == 1 and "401" in err


async def test_shared_flags_are_accepted_after_the_verb(upstream, start_gateway):
    gateway = await start_gateway(control_config(upstream.url), secrets=ADMIN)
    # The environment's key is wrong: only the flag after the verb can make this pass.
    code, out, err = await sits("wrong", "models", "list", "--url", base_url(gateway), "--admin-key", "admin-secret")
    assert code == 0, err
    assert "(registry version" in out
    code, _, err = await sits("admin-secret", "models", "show", "nope", "--url", base_url(gateway))
    assert code == 1 and "404" in err
