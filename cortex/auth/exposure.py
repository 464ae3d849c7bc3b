"""The refusal to serve an open gateway: with `auth = off`, cortex binds a
non-loopback address only when `allow_unauthenticated = true` says that
something in front of it does the authenticating."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name (or "" for every address): assume reachable


def exposure_problem(host: str, auth: str, allow_unauthenticated: bool) -> str | None:
    """Why cortex must not start with these settings, or None."""
    if auth != "off" or allow_unauthenticated or is_loopback(host):
        return None
    return (
        f"refusing to serve on {host} with auth = off: anyone who can reach that address "
        "could use every model and read or delete every stored response. Set auth = "
        "required (keys: `neuraxis keys create`), bind 127.0.0.1, or set "
        "allow_unauthenticated = true if a proxy in front of cortex authenticates clients."
    )
