"""/readyz tells a caller without a valid key only whether cortex is ready
(issue 31 point 7); a key sees the models it may use; with auth off,
everything."""

from __future__ import annotations

from cortex.auth.keys import KeyRequest
from tests.unit.cortex.api.fakes import auth_client, client


def test_readyz_lists_no_model_without_a_valid_key() -> None:
    app, _, (key,) = auth_client([], KeyRequest("t", ["e"]))
    with app:
        for headers in ({}, {"Authorization": "Bearer nx-unknown"}):
            answer = app.get("/readyz", headers=headers)
            assert (answer.status_code, answer.json()) == (200, {"status": "ready"})
        keyed = app.get("/readyz", headers={"Authorization": f"Bearer {key}"})
        assert keyed.json() == {"status": "ready", "models": ["e"]}


def test_readyz_lists_the_models_with_auth_off() -> None:
    app, _ = client([])
    with app:
        assert app.get("/readyz").json() == {"status": "ready", "models": ["e", "m"]}
