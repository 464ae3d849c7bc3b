"""Mutual TLS between cortex and the neurons: each side's three files
present, keys mode 0600, certificates in date, the certificate matching its
key and signed by the CA, and the neuron's certificate carrying the name
cortex checks (neuraxis-neuron)."""

from __future__ import annotations

import datetime
import ssl
import stat
from pathlib import Path
from typing import Any

from axon.tls import NEURON_SERVER_NAME, TlsFiles
from neuraxis.doctor.finding import Finding, Status
from neuraxis.doctor.host import Host

AREA = "tls"
# A certificate that expires within this is reported (doctor still passes).
WARN_DAYS = 30
RENEW = "make new files: neuraxis tls init DIR (or your CA), on every host of the cluster"
# Whose each side's key is on a packaged host (deploy/systemd's User=).
SERVICE_USERS = {"cortex": "neuraxis-cortex", "neuron": "neuraxis"}


def check(host: Host) -> list[Finding]:
    sides: list[tuple[str, TlsFiles]] = []
    if host.cortex and host.cortex.tls:
        sides.append(("cortex", host.cortex.tls))
    if host.neuron and host.neuron.tls:
        sides.append(("neuron", host.neuron.tls))
    if not sides:
        return [Finding(AREA, "tls", Status.SKIP, "no tls_* settings: plaintext gRPC")]
    findings: list[Finding] = []
    for side, files in sides:
        findings.extend(check_side(side, files, datetime.datetime.now(datetime.UTC)))
    return findings


def check_side(side: str, files: TlsFiles, now: datetime.datetime) -> list[Finding]:
    missing = [str(p) for p in (files.ca, files.cert, files.key) if not p.is_file()]
    if missing:
        return [Finding(AREA, side, Status.FAIL, f"missing: {', '.join(missing)}", RENEW)]
    findings = [_key_mode(side, files.key), _pair(side, files)]
    try:
        from cryptography import x509
    except ImportError:
        findings.append(
            Finding(AREA, f"{side} dates", Status.SKIP, "cryptography is not installed here")
        )
        return findings
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    for label, c, path in (("ca", ca, files.ca), ("cert", cert, files.cert)):
        findings.append(_dates(f"{side} {label}", path, c, now))
    findings.append(_chain(side, files, ca, cert))
    if side == "neuron":
        findings.append(_names(files.cert, cert))
    return findings


def _key_mode(side: str, key: Path) -> Finding:
    mode = stat.S_IMODE(key.stat().st_mode)
    if mode & 0o077:
        return Finding(
            AREA,
            f"{side} key",
            Status.FAIL,
            f"{key}: mode {mode:04o}; others than its owner can read the private key",
            f"chmod 0600 {key} (owned by the service's user, {SERVICE_USERS[side]})",
        )
    return Finding(AREA, f"{side} key", Status.OK, f"{key}: mode {mode:04o}")


def _pair(side: str, files: TlsFiles) -> Finding:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_cert_chain(files.cert, files.key)
    except (ssl.SSLError, OSError) as e:
        return Finding(
            AREA,
            f"{side} pair",
            Status.FAIL,
            f"{files.cert} and {files.key} do not go together ({e})",
            RENEW,
        )
    return Finding(AREA, f"{side} pair", Status.OK, f"{files.cert} matches its key")


def _dates(check: str, path: Path, cert: Any, now: datetime.datetime) -> Finding:
    after = cert.not_valid_after_utc
    before = cert.not_valid_before_utc
    if now > after:
        return Finding(
            AREA, check, Status.FAIL, f"{path} expired on {after:%Y-%m-%d %H:%M} UTC", RENEW
        )
    if now < before:
        return Finding(
            AREA,
            check,
            Status.FAIL,
            f"{path} is valid only from {before:%Y-%m-%d %H:%M} UTC",
            "check this host's clock (chronyc tracking)",
        )
    days = (after - now).days
    if days < WARN_DAYS:
        return Finding(AREA, check, Status.WARN, f"{path} expires in {days} days", RENEW)
    return Finding(AREA, check, Status.OK, f"{path} valid until {after:%Y-%m-%d}")


def _chain(side: str, files: TlsFiles, ca: Any, cert: Any) -> Finding:
    from cryptography.exceptions import InvalidSignature

    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature) as e:
        return Finding(
            AREA,
            f"{side} chain",
            Status.FAIL,
            f"{files.cert} is not signed by {files.ca} ({type(e).__name__}): the other "
            "side refuses it",
            "use a certificate and a CA from the same `neuraxis tls init` (or your CA)",
        )
    return Finding(AREA, f"{side} chain", Status.OK, f"{files.cert} is signed by {files.ca}")


def _names(path: Path, cert: Any) -> Finding:
    from cryptography import x509

    try:
        names = cert.extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        ).value.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        names = []
    if NEURON_SERVER_NAME not in names:
        return Finding(
            AREA,
            "neuron names",
            Status.FAIL,
            f"{path} names {', '.join(names) or 'no DNS name'}; cortex checks {NEURON_SERVER_NAME}",
            f"issue it with the DNS name {NEURON_SERVER_NAME} (neuraxis tls init does)",
        )
    return Finding(AREA, "neuron names", Status.OK, f"{path} names {', '.join(names)}")
