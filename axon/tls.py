"""The mutual-TLS files of one side of the cortex ↔ neuron link (settings
`tls_ca`, `tls_cert`, `tls_key`): checking that they come as a set, and
reading them.

Both sides use this; each makes its own grpc credentials from what it reads
(neuron/server.py the server's, cortex/routing/client.py the channel's), and
`neuraxis tls init` (neuraxis/tls.py) makes the files.

Without the files a side whose gRPC leaves the host refuses to start unless
the setting `plaintext` says so on purpose, and then it warns at every start
(`allowed_plaintext`); on loopback only (`neuraxis up`) neither is needed.

Every neuron certificate carries the DNS name `NEURON_SERVER_NAME`, and a
client checks that name whatever address it dials: neurons listen on
addresses the controller picks, so one neuron certificate serves a whole
cluster, and what makes a neuron genuine is the cluster's CA.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from axon.settings import SettingsError

# The name a client checks in a neuron's certificate (a DNS subject
# alternative name), whichever address it dialled.
NEURON_SERVER_NAME = "neuraxis-neuron"
# The name in cortex's certificate (the neuron checks only the CA).
CORTEX_CLIENT_NAME = "neuraxis-cortex"
# The environment a neuron reads its three files from (NeuronSettings'
# NEURAXIS_NEURON_ prefix): the host agent sets it for the replicas it runs,
# and a replica reads it back for its own start-up checks.
NEURON_TLS_ENV = ("NEURAXIS_NEURON_TLS_CA", "NEURAXIS_NEURON_TLS_CERT", "NEURAXIS_NEURON_TLS_KEY")
# And its plaintext setting, handed on the same way.
NEURON_PLAINTEXT_ENV = "NEURAXIS_NEURON_PLAINTEXT"


class TlsError(SettingsError):
    """A TLS file is missing or unreadable; the message names it."""


@dataclass(frozen=True)
class TlsMaterial:
    """The PEM bytes grpc's credentials take."""

    ca: bytes
    cert: bytes
    key: bytes


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path

    def read(self) -> TlsMaterial:
        return TlsMaterial(
            ca=_read("tls_ca", self.ca),
            cert=_read("tls_cert", self.cert),
            key=_read("tls_key", self.key),
        )


def tls_files(ca: Path | None, cert: Path | None, key: Path | None) -> TlsFiles | None:
    """The three files, or None for none of them (plaintext gRPC); ValueError
    when only some are given, since half a TLS setup would silently fall back
    to plaintext or fail at the first call."""
    given = {"tls_ca": ca, "tls_cert": cert, "tls_key": key}
    missing = [name for name, path in given.items() if path is None]
    if len(missing) == len(given):
        return None
    if missing:
        raise ValueError(
            f"mutual TLS needs tls_ca, tls_cert and tls_key; {', '.join(missing)} unset"
        )
    assert ca is not None and cert is not None and key is not None
    return TlsFiles(ca=ca, cert=cert, key=key)


def check_plaintext(files: TlsFiles | None, plaintext: bool) -> None:
    """ValueError when `plaintext` is set beside the TLS files: the two
    contradict each other, and neither may silently win."""
    if plaintext and files is not None:
        raise ValueError(
            "plaintext = true and mutual TLS (tls_ca, tls_cert, tls_key) are both set: choose one"
        )


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, IPv6 with or without brackets)
    is this host's loopback: traffic to it never reaches a network."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plaintext_warning(who: str, link: str, plaintext: bool, hosts: Iterable[str]) -> str | None:
    """What a side without TLS files says at start, or None when every one
    of `hosts` (the addresses the gRPC link uses) is loopback: a warning
    when `plaintext` chose it, else why it refuses to start (allowed_plaintext)."""
    if all(is_loopback(host) for host in hosts):
        return None
    if plaintext:
        return (
            f"{who}: {link} is plaintext gRPC (plaintext = true): anyone on the network path "
            "can read and change prompts and answers, and reach the neurons without a "
            "certificate. Mutual TLS: `neuraxis tls init` and the tls_* settings (docs/deploy.md, "
            '"Mutual TLS")'
        )
    return (
        f"{who}: refusing plaintext gRPC on {link}: no tls_ca, tls_cert and tls_key are set. "
        "Make the cluster's files with `neuraxis tls init` and set them (docs/deploy.md, "
        '"Mutual TLS"), or set plaintext = true (--plaintext) to run without TLS on purpose'
    )


def allowed_plaintext(
    log: logging.Logger, who: str, link: str, plaintext: bool, hosts: Iterable[str]
) -> bool:
    """(A side without TLS files, at start.) Whether it may start: yes on
    loopback; yes with `plaintext`, warning at every start; else no, said
    as an error (the caller exits 2, which its unit does not restart)."""
    line = plaintext_warning(who, link, plaintext, hosts)
    if line is None:
        return True
    if plaintext:
        log.warning("%s", line)
        return True
    log.error("%s", line)
    return False


def tls_from_env(env: Mapping[str, str]) -> TlsFiles | None:
    """A neuron's files as NEURON_TLS_ENV gives them in `env`, or None."""
    ca, cert, key = (Path(env[name]) if env.get(name) else None for name in NEURON_TLS_ENV)
    return tls_files(ca, cert, key)


def _read(setting: str, path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TlsError(f"{setting}: cannot read {path}: {e.strerror or e}") from None
    if b"-----BEGIN " not in data:
        raise TlsError(f"{setting}: {path} is not a PEM file")
    return data
