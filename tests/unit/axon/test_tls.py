"""The TLS settings: all three files or none, on both sides, and a file that
cannot be read named with its setting."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from axon.neuron_settings import NeuronSettings
from axon.settings import SettingsError, load_settings
from axon.tls import TlsError, TlsFiles, tls_files, tls_from_env
from cortex.config import CortexSettings

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_none_of_the_files_is_plaintext() -> None:
    assert tls_files(None, None, None) is None
    assert CortexSettings().tls is None
    assert NeuronSettings().tls is None


def test_all_three_files_are_mutual_tls() -> None:
    files = tls_files(Path("ca.crt"), Path("n.crt"), Path("n.key"))
    assert files == TlsFiles(Path("ca.crt"), Path("n.crt"), Path("n.key"))
    settings = NeuronSettings(tls_ca="ca.crt", tls_cert="n.crt", tls_key="n.key")
    assert settings.tls == files


@pytest.mark.parametrize("settings_class", [CortexSettings, NeuronSettings])
def test_some_of_the_files_are_refused_with_the_missing_ones_named(
    settings_class: type[CortexSettings] | type[NeuronSettings],
) -> None:
    with pytest.raises(ValidationError, match="tls_key unset"):
        settings_class(tls_ca="ca.crt", tls_cert="c.crt")
    with pytest.raises(ValidationError, match="tls_ca, tls_key unset"):
        settings_class(tls_cert="c.crt")


def test_reading_gives_the_pem_bytes(tmp_path: Path) -> None:
    for name in ("ca.crt", "c.crt", "c.key"):
        (tmp_path / name).write_bytes(PEM + name.encode())
    material = TlsFiles(tmp_path / "ca.crt", tmp_path / "c.crt", tmp_path / "c.key").read()
    assert material.ca.endswith(b"ca.crt")
    assert material.cert.endswith(b"c.crt")
    assert material.key.endswith(b"c.key")


def test_a_missing_or_non_pem_file_names_its_setting(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(PEM)
    (tmp_path / "c.crt").write_bytes(b"not a certificate")
    files = TlsFiles(tmp_path / "ca.crt", tmp_path / "c.crt", tmp_path / "missing.key")
    with pytest.raises(TlsError, match=r"tls_cert: .*c\.crt is not a PEM file"):
        files.read()
    (tmp_path / "c.crt").write_bytes(PEM)
    with pytest.raises(TlsError, match=r"tls_key: cannot read .*missing\.key"):
        files.read()
    # A configuration error: `neuraxis` reports it as one (exit status 2).
    assert issubclass(TlsError, SettingsError)


ETC = Path(__file__).resolve().parents[3] / "deploy" / "etc" / "neuraxis"


@pytest.mark.parametrize(
    ("name", "settings_class", "stem"),
    [("cortex.toml", CortexSettings, "cortex"), ("neuron.toml", NeuronSettings, "neuron")],
)
def test_the_packaged_configs_turn_mutual_tls_on(
    name: str,
    settings_class: type[CortexSettings] | type[NeuronSettings],
    stem: str,
) -> None:
    # The files the RPM's post-install makes (`neuraxis tls init
    # /etc/neuraxis/tls`: tests/rpm checks it does).
    settings = load_settings(settings_class, ETC / name, {})
    tls = Path("/etc/neuraxis/tls")
    assert settings.tls == TlsFiles(tls / "ca.crt", tls / f"{stem}.crt", tls / f"{stem}.key")
    assert not settings.plaintext


def test_a_neurons_files_from_its_environment() -> None:
    env = {
        "NEURAXIS_NEURON_TLS_CA": "/t/ca.crt",
        "NEURAXIS_NEURON_TLS_CERT": "/t/n.crt",
        "NEURAXIS_NEURON_TLS_KEY": "/t/n.key",
        "NEURAXIS_CORTEX_TLS_CA": "/elsewhere/ca.crt",
    }
    assert tls_from_env(env) == TlsFiles(Path("/t/ca.crt"), Path("/t/n.crt"), Path("/t/n.key"))
    assert tls_from_env({"NEURAXIS_CORTEX_TLS_CA": "/elsewhere/ca.crt"}) is None
    with pytest.raises(ValueError, match="tls_key unset"):
        tls_from_env({k: v for k, v in env.items() if not k.endswith("KEY")})
