from __future__ import annotations

import socket

import pytest

from cortex.cluster.backend import ReplicaStartError
from cortex.cluster.replica import _free_port


def test_a_port_from_the_configured_range_skips_busy_and_taken_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        first = busy.getsockname()[1]
        monkeypatch.setenv("P", f"{first}-{first + 2}")
        # first is bound, first + 1 is taken by the caller's other port.
        assert _free_port("127.0.0.1", "P", taken=first + 1) == first + 2
        monkeypatch.setenv("P", f"{first}-{first}")
        with pytest.raises(ReplicaStartError, match="no free port left in P="):
            _free_port("127.0.0.1", "P")


def test_without_a_range_any_free_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("P", raising=False)
    assert _free_port("127.0.0.1", "P") > 0
