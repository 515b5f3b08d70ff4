"""The secret key hashes are computed under (HMAC-SHA256, `hash_key`).

From the environment variable `tenants.key_secret_env` when set: every replica sharing a database must
use the same one. With the embedded SQLite store and no variable, a random one is made once and kept
next to the database (mode 0600), so `sits serve` works with no setup; a PostgreSQL store refuses to
start without the variable, since replicas with different secrets would not know each other's keys.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from sits.errors import ConfigError

_FILE = "tenants-key-secret"


def key_secret(from_env: str | None, env_name: str, database_url: str | None, data_dir: Path) -> bytes:
    if from_env:
        return from_env.encode()
    if database_url is not None and not database_url.startswith("sqlite:"):
        raise ConfigError(f"tenants: set {env_name} (the same value on every replica) to use {database_url.split(':')[0]}")
    path = data_dir / _FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        draft = data_dir / f".{_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        try:
            os.link(draft, path)  # whole or not at all; when several workers race, the first one wins
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    text = path.read_text().strip()
    if not text:
        raise ConfigError(f"tenants: {path} is empty; remove it (keys made under it stop working) or set {env_name}")
    return text.encode()
