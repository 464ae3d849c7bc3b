"""The refusal to serve an open gateway on a reachable address."""

from __future__ import annotations

import pytest

from cortex.auth.exposure import exposure_problem, is_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_addresses_may_serve_with_auth_off(host: str) -> None:
    assert is_loopback(host)
    assert exposure_problem(host, "off", allow_unauthenticated=False) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.10", "cortex.internal", ""])
def test_a_reachable_address_with_auth_off_is_refused_saying_why(host: str) -> None:
    problem = exposure_problem(host, "off", allow_unauthenticated=False)
    assert problem is not None
    assert "auth = off" in problem and "allow_unauthenticated" in problem
    assert "every model" in problem


def test_auth_required_or_an_explicit_allowance_may_serve_anywhere() -> None:
    assert exposure_problem("0.0.0.0", "required", allow_unauthenticated=False) is None
    assert exposure_problem("0.0.0.0", "off", allow_unauthenticated=True) is None
