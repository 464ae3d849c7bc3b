"""`neuraxis keys create | list | revoke`: API keys in the store cortex uses
(the state directory's SQLite file, or PostgreSQL with --postgres-dsn;
--config reads both from cortex's TOML, as cortex does). A key made here
works on cortex's next request, no restart; a revocation within cortex's
auth_cache_s.

The secret is printed once, alone on stdout (`KEY=$(neuraxis keys create
…)`); only its hash is stored, so it cannot be shown again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cortex.auth.authenticator import limits_of
from cortex.auth.keys import KeyRequest, make_key
from cortex.auth.limits import Limits
from cortex.config import CortexSettings
from cortex.store.keys import SQLITE_FILE, ApiKey, KeyStore, open_key_store
from neuraxis.commands.shared import (
    Help,
    Subparsers,
    add_group,
    add_store_commands,
    fail,
    store_settings,
)

COMMANDS = {
    "create": Help(
        "make an API key (printed once)",
        "Make an API key for a tenant and print it (once: only its hash is kept).",
    ),
    "list": Help("list API keys", "One line per key (never the secret)."),
    "revoke": Help("revoke an API key", "Revoke a key by its id (key_…)."),
}


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    text = Help("manage API keys", "API key commands.")
    keys, commands = add_group(sub, "keys", text, COMMANDS)
    create = commands["create"]
    create.add_argument("--tenant", required=True, help="the tenant the key acts for")
    create.add_argument(
        "--models", help="comma-separated model ids the key may use (default: every model)"
    )
    create.add_argument("--rpm", type=_positive, help="requests per minute")
    create.add_argument("--tpm", type=_positive, help="tokens per minute (prompt + output)")
    create.add_argument("--max-concurrent", type=_positive, help="requests in flight at once")
    create.add_argument("--expires-days", type=_positive, help="the key expires after N days")
    commands["revoke"].add_argument("id", help="the key's id, as `keys list` shows it")
    add_store_commands(commands)
    return keys


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def run(args: argparse.Namespace) -> int:
    settings = store_settings(args)
    own_state_file(settings)
    store = open_key_store(settings.store.state_dir, settings.store.postgres_dsn)
    return asyncio.run(_with_store(store, args, settings.auth.default_limits()))


def own_state_file(settings: CortexSettings) -> None:
    """Before a command opens the SQLite store as root (keys, tenants,
    usage): `own_as_directory`, and its note on stderr."""
    if settings.store.postgres_dsn is None:
        note = own_as_directory(settings.store.state_dir / SQLITE_FILE, os.geteuid())
        if note is not None:
            print(f"neuraxis: {note}", file=sys.stderr)


def own_as_directory(database: Path, euid: int) -> str | None:
    """As root, make a new SQLite file its state directory's owner's: a
    file root makes is root's, and cortex, running as its own user, could
    not write it. (An existing file needs nothing: SQLite gives the journal
    files it makes as root the database's owner.) A note for stderr, or
    None when nothing was done."""
    if euid != 0 or database.exists() or not database.parent.is_dir():
        return None
    directory = database.parent.stat()
    if directory.st_uid == 0:
        return None
    os.close(os.open(database, os.O_CREAT | os.O_RDWR, 0o600))
    os.chown(database, directory.st_uid, directory.st_gid)
    return (
        f"made {database} as root and gave it to the state directory's owner "
        f"(uid {directory.st_uid}), so that cortex can write it"
    )


async def _with_store(store: KeyStore, args: argparse.Namespace, defaults: Limits) -> int:
    try:
        if args.keys_command == "create":
            return await _create(store, args)
        if args.keys_command == "list":
            return await _list(store, args.json, defaults)
        return await _revoke(store, args.id)
    finally:
        await store.close()


async def _create(store: KeyStore, args: argparse.Namespace) -> int:
    models = [m.strip() for m in (args.models or "").split(",") if m.strip()]
    request = KeyRequest(
        tenant=args.tenant,
        models=models,
        rpm=args.rpm,
        tpm=args.tpm,
        max_concurrent=args.max_concurrent,
        expires_days=args.expires_days,
    )
    secret, record = make_key(request, int(time.time()))
    await store.add(record)
    print(secret, flush=True)
    print(
        f"neuraxis: {record.id} for tenant {record.tenant}; the key is shown only this once",
        file=sys.stderr,
    )
    return 0


def key_view(key: ApiKey, now: float, defaults: Limits | None = None) -> dict[str, Any]:
    """What `keys list` shows of a key: everything but its hash, and the
    limits cortex applies to it (`limits`: its own, or the cluster's
    defaults, [auth] default_*, for those it does not name)."""
    if key.revoked_at is not None:
        state = "revoked"
    elif key.expires_at is not None and now >= key.expires_at:
        state = "expired"
    else:
        state = "active"
    return {
        "id": key.id,
        "tenant": key.tenant,
        "models": key.models,
        "rpm": key.rpm,
        "tpm": key.tpm,
        "max_concurrent": key.max_concurrent,
        "created_at": key.created_at,
        "expires_at": key.expires_at,
        "last_used_at": key.last_used_at,
        "revoked_at": key.revoked_at,
        "state": state,
        "limits": asdict(limits_of(key, defaults or Limits())),
    }


def _when(epoch: int | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _limit(own: int | None, applied: int | None) -> str:
    """A limit as the table shows it: the key's own, or the default it
    gets marked with a `*`."""
    if own is not None:
        return str(own)
    return "-" if applied is None else f"{applied}*"


async def _list(store: KeyStore, as_json: bool, defaults: Limits) -> int:
    now = time.time()
    views = [key_view(k, now, defaults) for k in await store.list()]
    if as_json:
        print(json.dumps(views, indent=2))
        return 0
    header = ["ID", "TENANT", "MODELS", "RPM", "TPM", "CONC", "CREATED", "LAST USED", "STATE"]
    rows = [
        [
            v["id"],
            v["tenant"],
            ",".join(v["models"]) or "*",
            _limit(v["rpm"], v["limits"]["rpm"]),
            _limit(v["tpm"], v["limits"]["tpm"]),
            _limit(v["max_concurrent"], v["limits"]["max_concurrent"]),
            _when(v["created_at"]),
            _when(v["last_used_at"]),
            v["state"],
        ]
        for v in views
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    if any("*" in cell for row in rows for cell in row[3:6]):
        print("neuraxis: * the cluster's default ([auth] default_*)", file=sys.stderr)
    return 0


async def _revoke(store: KeyStore, key_id: str) -> int:
    if not await store.revoke(key_id, int(time.time())):
        return fail(f"no active key {key_id}")
    print(f"{key_id}: revoked")
    return 0
