"""`neuraxis tls init DIR`: a cluster's mutual-TLS files, made with the
`cryptography` package.

    ca.crt      the cluster's CA (every host gets a copy: settings tls_ca)
    ca.key      its key: keep it off the hosts; it only signs new certificates
    cortex.crt  cortex's client certificate (cortex.toml: tls_cert)
    cortex.key
    neuron.crt  the neurons' certificate, one for every neuron host
    neuron.key  (neuron.toml: tls_cert, tls_key)

Keys are P-256, written with mode 0600: the CA's stays its maker's (root,
when the RPM's post-install makes the files); `Owners` hands cortex.key and
neuron.key to the users of the services that read them, so that neither
reads the other's, and the directory to a group both are in.

The neuron certificate names `neuraxis-neuron` (what cortex checks,
whatever address it dials: axon/tls.py), `localhost`, `127.0.0.1` and any
`--san` given; it may also act as a client, so that a replica's health
checks on its own host can use it. Reading and using the files is not here: neuron/server.py and
cortex/routing/client.py make grpc credentials from them.
"""

from __future__ import annotations

import datetime
import grp
import ipaddress
import os
import pwd
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from axon.tls import CORTEX_CLIENT_NAME, NEURON_SERVER_NAME

CA_DAYS = 3650
LEAF_DAYS = 825  # what public CAs were held to; renew with your own CA's tools
FILES = ("ca.crt", "ca.key", "cortex.crt", "cortex.key", "neuron.crt", "neuron.key")


class TlsInitError(Exception):
    """The directory cannot take the files; the message says why."""


@dataclass(frozen=True)
class Owners:
    """Who gets the files (None: whoever runs `tls init`): cortex.key's
    user, neuron.key's user (each with its primary group), and the group of
    the directory (mode 0750 then), which both users must be in to reach
    their files."""

    cortex_user: str | None = None
    neuron_user: str | None = None
    group: str | None = None

    def resolve(self) -> dict[str, tuple[int, int]]:
        """file or "." (the directory) -> (uid, gid), -1 for unchanged;
        TlsInitError for a name the host does not know."""
        found: dict[str, tuple[int, int]] = {}
        for name, user in (("cortex.key", self.cortex_user), ("neuron.key", self.neuron_user)):
            if user is not None:
                try:
                    entry = pwd.getpwnam(user)
                except KeyError:
                    raise TlsInitError(f"no user {user} on this host (for {name})") from None
                found[name] = (entry.pw_uid, entry.pw_gid)
        if self.group is not None:
            try:
                found["."] = (-1, grp.getgrnam(self.group).gr_gid)
            except KeyError:
                raise TlsInitError(f"no group {self.group} on this host") from None
        return found


@dataclass(frozen=True)
class _Issued:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def init_cluster_tls(
    directory: Path,
    sans: Sequence[str] = (),
    now: datetime.datetime | None = None,
    owners: Owners = Owners(),
) -> list[Path]:
    """Write a CA and cortex's and the neurons' certificates and keys into
    `directory` (made if missing), owned as `owners` says; return the paths
    written. Refuses to overwrite: a second CA would lock every host with
    the first one out."""
    existing = [name for name in FILES if (directory / name).exists()]
    if existing:
        raise TlsInitError(f"{directory} already holds {', '.join(existing)}; not overwritten")
    # Every name looked up before anything is written: a typo leaves nothing.
    ids = owners.resolve()
    now = now or datetime.datetime.now(datetime.UTC)
    ca = _ca(now)
    cortex = _leaf(ca, CORTEX_CLIENT_NAME, [CORTEX_CLIENT_NAME], server=False, now=now)
    names = [NEURON_SERVER_NAME, "localhost", "127.0.0.1", *sans]
    neuron = _leaf(ca, NEURON_SERVER_NAME, names, server=True, now=now)
    directory.mkdir(parents=True, exist_ok=True)
    if "." in ids:
        os.chown(directory, *ids["."])
        os.chmod(directory, 0o750)
    written = []
    for stem, issued in (("ca", ca), ("cortex", cortex), ("neuron", neuron)):
        written.append(_write(directory / f"{stem}.crt", _cert_pem(issued.cert), 0o644))
        key = _write(directory / f"{stem}.key", _key_pem(issued.key), 0o600)
        if key.name in ids:
            os.chown(key, *ids[key.name])  # still 0600: its user's alone
        written.append(key)
    return written


def _ca(now: datetime.datetime) -> _Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "neuraxis cluster CA")])
    cert = (
        _builder(name, name, key.public_key(), now, CA_DAYS)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            _key_usage(digital_signature=False, key_cert_sign=True, crl_sign=True), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _Issued(cert, key)


def _leaf(
    ca: _Issued, common_name: str, names: Sequence[str], server: bool, now: datetime.datetime
) -> _Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if server:
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    cert = (
        _builder(subject, ca.cert.subject, key.public_key(), now, LEAF_DAYS)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectAlternativeName(_general_names(names)), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
        .sign(ca.key, hashes.SHA256())
    )
    return _Issued(cert, key)


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    now: datetime.datetime,
    days: int,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        # An hour back: hosts whose clocks lag a little still accept it.
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def _key_usage(
    digital_signature: bool, key_cert_sign: bool = False, crl_sign: bool = False
) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _general_names(names: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):  # in order, once each
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, mode: int) -> Path:
    # Created with its final mode: a key is never readable by others, not
    # even between the write and a chmod.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, mode)  # the umask may have taken bits from a certificate's mode
    return path
