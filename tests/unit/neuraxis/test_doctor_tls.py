"""doctor's TLS checks on files made by `neuraxis tls init`: in order, an
expired certificate, a key others can read, a certificate from another CA,
a missing file."""

from __future__ import annotations

import datetime
from pathlib import Path

from axon.tls import TlsFiles
from neuraxis.doctor.finding import Finding, Status
from neuraxis.doctor.host import Host
from neuraxis.doctor.tls import check, check_side
from neuraxis.tls import init_cluster_tls

NOW = datetime.datetime.now(datetime.UTC)


def files(directory: Path, side: str) -> TlsFiles:
    return TlsFiles(directory / "ca.crt", directory / f"{side}.crt", directory / f"{side}.key")


def by_check(findings: list[Finding]) -> dict[str, Finding]:
    return {f.check: f for f in findings}


def test_files_from_tls_init_pass(tmp_path: Path) -> None:
    init_cluster_tls(tmp_path)
    for side in ("cortex", "neuron"):
        found = by_check(check_side(side, files(tmp_path, side), NOW))
        assert {f.status for f in found.values()} == {Status.OK}, found
    assert (
        "names neuraxis-neuron"
        in by_check(check_side("neuron", files(tmp_path, "neuron"), NOW))["neuron names"].found
    )


def test_an_expired_certificate_is_found_with_its_advice(tmp_path: Path) -> None:
    # Made three years ago: the leaves (825 days) expired, the CA (10 years) not.
    init_cluster_tls(tmp_path, now=NOW - datetime.timedelta(days=3 * 365))
    found = by_check(check_side("neuron", files(tmp_path, "neuron"), NOW))
    expired = found["neuron cert"]
    assert expired.status is Status.FAIL
    assert expired.found.startswith(f"{tmp_path / 'neuron.crt'} expired on ")
    assert "neuraxis tls init" in expired.advice
    assert found["neuron ca"].status is Status.OK


def test_a_certificate_about_to_expire_warns(tmp_path: Path) -> None:
    init_cluster_tls(tmp_path, now=NOW - datetime.timedelta(days=820))
    found = by_check(check_side("cortex", files(tmp_path, "cortex"), NOW))
    assert found["cortex cert"].status is Status.WARN
    assert "expires in 4 days" in found["cortex cert"].found


def test_a_key_others_can_read_fails(tmp_path: Path) -> None:
    init_cluster_tls(tmp_path)
    (tmp_path / "cortex.key").chmod(0o644)
    found = by_check(check_side("cortex", files(tmp_path, "cortex"), NOW))
    assert found["cortex key"].status is Status.FAIL
    assert "mode 0644" in found["cortex key"].found
    assert found["cortex key"].advice.startswith(f"chmod 0600 {tmp_path / 'cortex.key'}")


def test_a_certificate_of_another_ca_fails_the_chain(tmp_path: Path) -> None:
    init_cluster_tls(tmp_path / "one")
    init_cluster_tls(tmp_path / "two")
    one = files(tmp_path / "one", "neuron")
    mixed = TlsFiles(tmp_path / "two" / "ca.crt", one.cert, one.key)
    found = by_check(check_side("neuron", mixed, NOW))
    assert found["neuron chain"].status is Status.FAIL
    assert "is not signed by" in found["neuron chain"].found
    assert found["neuron pair"].status is Status.OK


def test_a_certificate_with_another_key_fails(tmp_path: Path) -> None:
    init_cluster_tls(tmp_path)
    wrong = TlsFiles(tmp_path / "ca.crt", tmp_path / "neuron.crt", tmp_path / "cortex.key")
    assert by_check(check_side("neuron", wrong, NOW))["neuron pair"].status is Status.FAIL


def test_a_missing_file_and_no_tls_at_all(tmp_path: Path) -> None:
    init_cluster_tls(tmp_path)
    (tmp_path / "neuron.key").unlink()
    (missing,) = check_side("neuron", files(tmp_path, "neuron"), NOW)
    assert missing.status is Status.FAIL and str(tmp_path / "neuron.key") in missing.found
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "neuron.toml").write_text('generation = "cpu"\n')
    (skipped,) = check(Host(config_dir=tmp_path / "etc"))
    assert skipped.status is Status.SKIP
