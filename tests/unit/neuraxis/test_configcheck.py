"""The example configuration shipped in deploy/etc/neuraxis (and packaged
into /etc/neuraxis) parses with the services' own settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuraxis.cli import main
from neuraxis.configcheck import check
from neuraxis.tls import init_cluster_tls

ETC = Path(__file__).resolve().parents[3] / "deploy" / "etc" / "neuraxis"


def test_the_shipped_configs_parse(tmp_path: Path) -> None:
    # They name the TLS files the RPM's post-install makes in
    # /etc/neuraxis/tls, which the check reads: here, made in tmp_path.
    init_cluster_tls(tmp_path / "tls")
    etc = tmp_path / "etc"
    etc.mkdir()
    for name in ("cortex.toml", "neuron.toml"):
        text = (ETC / name).read_text()
        assert '"/etc/neuraxis/tls/' in text
        (etc / name).write_text(text.replace("/etc/neuraxis/tls/", f"{tmp_path}/tls/"))
    results = check(
        etc / "cortex.toml", etc / "neuron.toml", ETC / "deployment.toml", ETC / "head.toml"
    )
    assert results == [
        f"{etc / 'cortex.toml'}: ok",
        f"{etc / 'neuron.toml'}: ok",
        f"{ETC / 'deployment.toml'}: ok (smollm2-135m-instruct×2, all-minilm-l6-v2×1)",
        f"{ETC / 'head.toml'}: ok",
    ]


def test_the_shipped_configs_without_their_tls_files_are_refused(tmp_path: Path) -> None:
    missing = tmp_path / "none"
    text = (ETC / "neuron.toml").read_text().replace("/etc/neuraxis/tls/", f"{missing}/")
    (tmp_path / "neuron.toml").write_text(text)
    (line,) = check(None, tmp_path / "neuron.toml", None)
    assert line.startswith(f"error: tls_ca: cannot read {missing}/ca.crt"), line


def test_a_bad_head_setting_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "head.toml"
    bad.write_text("ray_port = 0\n")
    (line,) = check(None, None, None, bad)
    assert line.startswith(f"error: invalid configuration in {bad}: ray_port"), line


def test_the_command_names_the_bad_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "cortex.toml"
    bad.write_text('port = "eighty"\n')
    spec = tmp_path / "deployment.toml"
    spec.write_text('[[models]]\nid = "a"\nsource = "b"\ngenerations = ["cpu"]\nreplicas = "x"\n')
    code = main(["config", "check", "--cortex", str(bad), "--deployment", str(spec)])
    err = capsys.readouterr().err
    assert code == 1
    assert f"invalid configuration in {bad}: port: Input should be a valid integer" in err
    assert f"{spec}: line 5: models.0.replicas: Input should be a valid integer" in err


def test_cluster_mode_needs_a_deployment_spec(tmp_path: Path) -> None:
    config = tmp_path / "cortex.toml"
    config.write_text("ray_head = true\n")
    (line,) = check(config, None, None)
    assert "cluster mode ([ray] address or head) needs a deployment spec" in line


def test_tls_files_that_cannot_be_read_are_named(tmp_path: Path) -> None:
    from neuraxis.tls import init_cluster_tls

    init_cluster_tls(tmp_path / "tls")
    for stem in ("cortex", "neuron"):
        config = tmp_path / f"{stem}.toml"
        config.write_text(
            f'tls_ca = "{tmp_path}/tls/ca.crt"\n'
            f'tls_cert = "{tmp_path}/tls/{stem}.crt"\n'
            f'tls_key = "{tmp_path}/tls/{stem}.key"\n'
        )
    assert check(tmp_path / "cortex.toml", tmp_path / "neuron.toml", None) == [
        f"{tmp_path / 'cortex.toml'}: ok",
        f"{tmp_path / 'neuron.toml'}: ok",
    ]
    (tmp_path / "tls" / "neuron.key").unlink()
    _, neuron = check(tmp_path / "cortex.toml", tmp_path / "neuron.toml", None)
    assert neuron.startswith(f"error: tls_key: cannot read {tmp_path}/tls/neuron.key")


def test_old_spellings_are_warned_about_with_the_one_preferred_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "cortex.toml"
    config.write_text(
        'routing = "power_of_two"\nmax_tools = 64\n[admission]\nqueue_size = 10\n'
        "[caps]\nmax_messages = 100\n"
    )
    monkeypatch.setenv("NEURAXIS_CORTEX_ADMISSION_QUEUE_TIMEOUT_S", "5")
    monkeypatch.setenv("NEURAXIS_CORTEX_RETRY_BUDGET__RATIO", "0.1")  # the new name: fine
    assert check(config, None, None) == [
        f"{config}: ok",
        f"warning: {config}: `routing` is now `policy` in [routing]",
        f"warning: {config}: `max_tools` is now `max_tools` in [caps]",
        "warning: NEURAXIS_CORTEX_ADMISSION_QUEUE_TIMEOUT_S (environment) is now "
        "NEURAXIS_CORTEX_ADMISSION__QUEUE_TIMEOUT_S",
    ]
    assert main(["config", "check", "--cortex", str(config)]) == 0
    assert "is now `policy` in [routing]" in capsys.readouterr().out


def test_the_new_tables_alone_draw_no_warning(tmp_path: Path) -> None:
    config = tmp_path / "cortex.toml"
    config.write_text('[routing]\npolicy = "power_of_two"\n[auth]\nmode = "off"\n')
    assert check(config, None, None) == [f"{config}: ok"]


def test_a_source_no_neuron_could_load_is_refused_with_its_line(tmp_path: Path) -> None:
    spec = tmp_path / "deployment.toml"
    spec.write_text(
        '[[models]]\nid = "a"\nsource = "Qwen/Qwen3-0.6B"\nrevision = "v1.2"\n'
        'generations = ["cpu"]\n\n'
        '[[models]]\nid = "b"\nsource = "qwen3"\ngenerations = ["cpu"]\n\n'
        '[[models]]\nid = "c"\nsource = "/var/lib/neuraxis/models/qwen"\nrevision = "v1"\n'
        'generations = ["cpu"]\n\n'
        # The simulated engine loads nothing: its source is a name.
        '[[models]]\nid = "d"\nsource = "sim"\ngenerations = ["cpu"]\n[models.engine]\n'
        'kind = "sim"\n'
    )
    assert check(None, None, spec) == [
        f"error: {spec}: line 9: models.1.source: 'qwen3' is neither a bundled model "
        "(all-minilm-l6-v2, smollm2-135m-instruct), a model directory (with a config.json) "
        "nor a Hugging Face repo id (org/name)",
        f"error: {spec}: line 15: models.2.revision: revision 'v1' pins a Hugging Face repo "
        "id, and '/var/lib/neuraxis/models/qwen' is none",
    ]
    assert main(["config", "check", "--deployment", str(spec)]) == 1


def test_repo_ids_bundled_ids_and_directories_pass(tmp_path: Path) -> None:
    spec = tmp_path / "deployment.toml"
    spec.write_text(
        '[[models]]\nid = "a"\nsource = "Qwen/Qwen3-0.6B"\nrevision = "v1.2"\n'
        'generations = ["cpu"]\n'
        '[[models]]\nid = "b"\nsource = "smollm2-135m-instruct"\ngenerations = ["cpu"]\n'
        '[[models]]\nid = "c"\nsource = "/var/lib/neuraxis/models/qwen"\ngenerations = ["cpu"]\n'
    )
    assert check(None, None, spec) == [f"{spec}: ok (a×1, b×1, c×1)"]


def test_the_neurons_model_is_checked_alike(tmp_path: Path) -> None:
    neuron = tmp_path / "neuron.toml"
    neuron.write_text('model = "Qwen/Qwen3-0.6B"\nrevision = "v1.2"\n')
    assert check(None, neuron, None) == [f"{neuron}: ok"]
    neuron.write_text('model = "qwen3"\n')
    (line,) = check(None, neuron, None)
    assert line.startswith(f"error: {neuron}: model: 'qwen3' is neither a bundled model")


def test_an_autoscaled_model_shows_its_bounds_and_a_contradiction_its_line(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "deployment.toml"
    model = '[[models]]\nid = "a"\nsource = "smollm2-135m-instruct"\ngenerations = ["cpu"]\n'
    spec.write_text(model + "[models.autoscale]\nmin_replicas = 0\nmax_replicas = 4\n")
    assert check(None, None, spec) == [f"{spec}: ok (a×0..4)"]
    spec.write_text(model + "replicas = 6\n[models.autoscale]\nmax_replicas = 4\n")
    assert check(None, None, spec) == [
        f"error: {spec}: line 5: models.0.replicas: replicas = 6 is outside autoscale's 1..4"
    ]
