"""`neuraxis tls init`: the files it writes, their modes, their chain to the
CA, their names and usages; and that gRPC mutual TLS works with them
in-process (the neuron's servicer, cortex's NeuronClient)."""

from __future__ import annotations

import datetime
import grp
import ipaddress
import os
import pwd
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID

from axon.errors import UnavailableError
from axon.v1 import neuron_pb2 as pb
from cortex.routing.client import NeuronClient, channel_credentials
from harness.tls import files, tls_neuron
from neuraxis.cli import main
from neuraxis.tls import FILES, Owners, TlsInitError, init_cluster_tls


def _cert(directory: Path, stem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate((directory / f"{stem}.crt").read_bytes())


def _sans(cert: x509.Certificate) -> list[str]:
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(n.value) for n in names]


def _usages(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_init_writes_a_ca_and_the_two_certificates_with_private_keys(tmp_path: Path) -> None:
    directory = tmp_path / "tls"
    written = init_cluster_tls(directory)
    assert sorted(p.name for p in written) == sorted(FILES)
    for name in ("ca.key", "cortex.key", "neuron.key"):
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600, name
        assert (directory / name).read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    for name in ("ca.crt", "cortex.crt", "neuron.crt"):
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o644, name


def test_the_certificates_chain_to_the_ca(tmp_path: Path) -> None:
    init_cluster_tls(tmp_path)
    ca = _cert(tmp_path, "ca")
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for stem in ("cortex", "neuron"):
        leaf = _cert(tmp_path, stem)
        leaf.verify_directly_issued_by(ca)  # raises when it is not
        assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_a_certificate_of_another_init_does_not_chain_to_this_ca(tmp_path: Path) -> None:
    init_cluster_tls(tmp_path / "a")
    init_cluster_tls(tmp_path / "b")
    # Same CA name, another key: the signature gives it away.
    with pytest.raises(InvalidSignature):
        _cert(tmp_path / "b", "neuron").verify_directly_issued_by(_cert(tmp_path / "a", "ca"))


def test_names_and_usages(tmp_path: Path) -> None:
    init_cluster_tls(tmp_path, sans=["10.0.0.21", "gpu1.example.internal"])
    neuron = _cert(tmp_path, "neuron")
    assert _sans(neuron) == [
        "neuraxis-neuron",
        "localhost",
        str(ipaddress.ip_address("127.0.0.1")),
        "10.0.0.21",
        "gpu1.example.internal",
    ]
    # The neuron's certificate also serves a replica's health checks as a client.
    assert _usages(neuron) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    cortex = _cert(tmp_path, "cortex")
    assert _usages(cortex) == {ExtendedKeyUsageOID.CLIENT_AUTH}
    assert _sans(cortex) == ["neuraxis-cortex"]


def test_validity_starts_just_before_now(tmp_path: Path) -> None:
    now = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    init_cluster_tls(tmp_path, now=now)
    neuron = _cert(tmp_path, "neuron")
    assert neuron.not_valid_before_utc == now - datetime.timedelta(hours=1)
    assert neuron.not_valid_after_utc > now + datetime.timedelta(days=365)


def test_existing_files_are_not_overwritten(tmp_path: Path) -> None:
    init_cluster_tls(tmp_path)
    before = (tmp_path / "ca.key").read_bytes()
    with pytest.raises(TlsInitError, match=r"ca\.crt"):
        init_cluster_tls(tmp_path)
    assert (tmp_path / "ca.key").read_bytes() == before


def test_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "tls"
    assert main(["tls", "init", str(directory), "--san", "10.0.0.21"]) == 0
    assert sorted(Path(line).name for line in capsys.readouterr().out.split()) == sorted(FILES)
    assert "10.0.0.21" in _sans(_cert(directory, "neuron"))
    assert main(["tls", "init", str(directory)]) == 1
    assert "not overwritten" in capsys.readouterr().err


def test_the_keys_go_to_the_services_users(tmp_path: Path) -> None:
    # This process's own user and group stand in for the services' (the RPM
    # tests hand them to neuraxis-cortex and neuraxis): what changes is the
    # directory, made 0750 for the group.
    me = pwd.getpwuid(os.getuid())
    group = grp.getgrgid(os.getgid()).gr_name
    directory = tmp_path / "tls"
    by = ["--cortex-user", me.pw_name, "--neuron-user", me.pw_name, "--group", group]
    assert main(["tls", "init", str(directory), *by]) == 0
    made = directory.stat()
    assert (stat.S_IMODE(made.st_mode), made.st_gid) == (0o750, os.getgid())
    for name in ("ca.key", "cortex.key", "neuron.key"):
        key = (directory / name).stat()
        assert (key.st_uid, key.st_gid, stat.S_IMODE(key.st_mode)) == (
            me.pw_uid,
            me.pw_gid,
            0o600,
        ), name


@pytest.mark.parametrize(
    ("owners", "message"),
    [
        (Owners(cortex_user="nx-no-such-user"), r"no user nx-no-such-user .*\(for cortex\.key\)"),
        (Owners(neuron_user="nx-no-such-user"), r"\(for neuron\.key\)"),
        (Owners(group="nx-no-such-group"), "no group nx-no-such-group on this host"),
    ],
)
def test_an_unknown_owner_leaves_nothing_written(
    tmp_path: Path, owners: Owners, message: str
) -> None:
    with pytest.raises(TlsInitError, match=message):
        init_cluster_tls(tmp_path / "tls", owners=owners)
    assert not (tmp_path / "tls").exists()


async def _info(client: NeuronClient) -> pb.InfoResponse:
    try:
        return await client.info(timeout=5)
    finally:
        await client.close()


async def test_grpc_mutual_tls_with_the_files(tmp_path: Path) -> None:
    init_cluster_tls(tmp_path / "a")
    init_cluster_tls(tmp_path / "b")
    a, b = tmp_path / "a", tmp_path / "b"
    async with tls_neuron(files(a, "neuron")) as address:
        credentials = channel_credentials(files(a, "cortex"))
        info = await _info(NeuronClient(address, credentials))
        assert [m.id for m in info.models] == ["m"]
        # The neuron's own files make a client too (a replica's health checks).
        assert (await _info(NeuronClient(address, channel_credentials(files(a, "neuron"))))).ready
        with pytest.raises(UnavailableError):
            await _info(NeuronClient(address))  # plaintext
        with pytest.raises(UnavailableError):
            # Trusts the neuron, but shows a certificate of another CA.
            await _info(NeuronClient(address, channel_credentials(files(b, "cortex", a))))
        with pytest.raises(UnavailableError):
            # A client that does not trust this cluster's CA.
            await _info(NeuronClient(address, channel_credentials(files(a, "cortex", b))))
