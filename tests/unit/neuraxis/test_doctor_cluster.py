"""doctor's cluster checks: the Ray head answering or not, the token file
missing, readable by anyone, empty or right; the node's labels."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuraxis.doctor.cluster import check
from neuraxis.doctor.finding import Finding, Status
from neuraxis.doctor.host import Host


@pytest.fixture
def head() -> Iterator[str]:
    """A listening socket standing in for the Ray head's GCS port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture(autouse=True)
def no_token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)


def neuron_host(directory: Path, ray_address: str) -> Host:
    (directory / "neuron.toml").write_text(f'generation = "cpu"\nray_address = "{ray_address}"\n')
    return Host(config_dir=directory)


def by_check(findings: list[Finding]) -> dict[str, Finding]:
    return {f.check: f for f in findings}


def with_token(directory: Path, head: str, text: str, mode: int) -> tuple[Path, Finding]:
    """The token file written with `text` and `mode`, and what the token
    check finds of it."""
    token = directory / "ray-auth-token"
    token.write_text(text)
    token.chmod(mode)
    return token, by_check(check(neuron_host(directory, head)))["token"]


def test_a_missing_token_file_is_found_with_its_advice(tmp_path: Path, head: str) -> None:
    found = by_check(check(neuron_host(tmp_path, head)))
    assert found["head"].status is Status.OK
    token = found["token"]
    assert token.status is Status.FAIL
    assert token.found == f"{tmp_path / 'ray-auth-token'} is missing: Ray refuses the node"
    assert "copy" in token.advice and "install -m 0640" in token.advice


def test_a_token_anyone_can_read_or_an_empty_one_fails(tmp_path: Path, head: str) -> None:
    token, found = with_token(tmp_path, head, "secret\n", 0o644)
    assert found.status is Status.FAIL
    assert found.advice == f"chmod 0640 {token}"
    _, found = with_token(tmp_path, head, "", 0o640)
    assert found.status is Status.FAIL
    assert found.found.endswith("is empty")


def test_a_right_token_and_the_labels(tmp_path: Path, head: str) -> None:
    _, token = with_token(tmp_path, head, "secret\n", 0o640)
    assert token.status is Status.OK
    assert "(mode 0640, " in token.found
    found = by_check(check(neuron_host(tmp_path, head)))
    # This machine's NVML reports no GPU: a cpu node.
    assert found["labels"].found.startswith(
        "this node joins with neuraxis.io/generation=cpu and 0 GPUs"
    )


def test_a_head_that_does_not_answer(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    found = by_check(check(neuron_host(tmp_path, closed)))
    assert found["head"].status is Status.FAIL
    assert "does not answer" in found["head"].found
    assert "neuraxis-head" in found["head"].advice


def test_a_host_outside_a_cluster_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "neuron.toml").write_text('generation = "cpu"\n')
    (skipped,) = check(Host(config_dir=tmp_path))
    assert skipped.status is Status.SKIP
