"""`neuraxis tenants set | list | show`: tenants' rows in the store cortex
uses (as `keys`: the state directory's SQLite file, or PostgreSQL). A row
sets a tenant's weight in the fair queue, the highest priority class its
requests may ask for and its tenant-wide limits (over all its keys); a
tenant without one gets the defaults. Every cortex reads the rows again
every [tenancy] refresh_s seconds: a change takes effect within that, no
restart.

`set` changes only the options it is given; the others keep their value
(or the default, for a new tenant).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
from typing import Any

from axon.priority import CLASSES
from cortex.store.tenants import Tenant, TenantStore, open_tenant_store
from neuraxis.commands.keys import own_state_file
from neuraxis.commands.shared import (
    Help,
    Subparsers,
    add_group,
    add_store_commands,
    store_settings,
)

COMMANDS = {
    "set": Help(
        "make or change a tenant",
        "Set a tenant's weight, highest priority class and tenant-wide limits; options not "
        "given keep their value (a new tenant: weight 1, class default, no limits).",
    ),
    "list": Help("list tenants", "One line per tenant that has a row."),
    "show": Help(
        "show a tenant", "What cortex applies to a tenant (the defaults when it has no row)."
    ),
}
# The options of `set`: the Tenant field each one sets.
_OPTIONS = ("weight", "max_priority", "max_concurrent", "tpm")


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    text = Help("manage tenants", "Tenant commands: weights, priority classes, tenant limits.")
    tenants, commands = add_group(sub, "tenants", text, COMMANDS)
    put = commands["set"]
    put.add_argument("name", help="the tenant, as its keys name it (keys create --tenant)")
    put.add_argument(
        "--weight", type=_weight, help="its share of a busy model against other tenants' (> 0)"
    )
    put.add_argument(
        "--max-priority",
        choices=CLASSES,
        help="the highest class its requests may ask for (higher ones are lowered to it)",
    )
    put.add_argument(
        "--max-concurrent", type=_positive, help="requests in flight at once, all its keys together"
    )
    put.add_argument("--tpm", type=_positive, help="tokens per minute, all its keys together")
    commands["show"].add_argument("name", help="the tenant")
    add_store_commands(commands)
    return tenants


def _weight(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} is not a number above 0")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive whole number")
    return value


def run(args: argparse.Namespace) -> int:
    settings = store_settings(args)
    own_state_file(settings)
    store = open_tenant_store(settings.store.state_dir, settings.store.postgres_dsn)
    return asyncio.run(_with_store(store, args))


async def _with_store(store: TenantStore, args: argparse.Namespace) -> int:
    try:
        if args.tenants_command == "set":
            return await _set(store, args)
        if args.tenants_command == "list":
            return await _list(store, args.json)
        return await _show(store, args.name)
    finally:
        await store.close()


def changed(current: Tenant, args: argparse.Namespace) -> Tenant:
    """`current` with the options `args` gives."""
    given = {name: getattr(args, name) for name in _OPTIONS if getattr(args, name) is not None}
    return dataclasses.replace(current, **given)


async def _set(store: TenantStore, args: argparse.Namespace) -> int:
    tenant = changed(await store.get(args.name) or Tenant(args.name), args)
    await store.put(tenant)
    print(json.dumps(tenant_view(tenant)))
    return 0


def tenant_view(tenant: Tenant, stored: bool = True) -> dict[str, Any]:
    """What `list` and `show` say of a tenant (`stored`: it has a row)."""
    return {**dataclasses.asdict(tenant), "stored": stored}


async def _list(store: TenantStore, as_json: bool) -> int:
    views = [tenant_view(t) for t in await store.tenants()]
    if as_json:
        print(json.dumps(views, indent=2))
        return 0
    header = ["TENANT", "WEIGHT", "MAX PRIORITY", "CONC", "TPM"]
    rows = [
        [
            v["name"],
            f"{v['weight']:g}",
            v["max_priority"],
            _or_dash(v["max_concurrent"]),
            _or_dash(v["tpm"]),
        ]
        for v in views
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


async def _show(store: TenantStore, name: str) -> int:
    stored = await store.get(name)
    print(json.dumps(tenant_view(stored or Tenant(name), stored is not None), indent=2))
    return 0
