"""The settings that reach the HTTP guard, and uvicorn running it: each
worker gets the protocol with its limits bound (a picklable partial). The
guard's behaviour is tested against a real cortex in
tests/integration/test_slow_clients.py."""

from __future__ import annotations

import functools
import pickle

from cortex.config import CortexSettings, HttpSettings
from cortex.http.guard import ClientLimits, GuardedHttpProtocol
from cortex.main import _options, client_limits


def test_the_limits_come_from_the_settings() -> None:
    http = HttpSettings(
        header_timeout_s=3,
        body_timeout_s=7,
        max_header_count=12,
        max_header_bytes=999,
        send_timeout_s=5,
    )
    settings = CortexSettings(http=http)
    assert client_limits(settings) == ClientLimits(3, 7, 12, 999, 5)


def test_the_defaults_are_what_the_docs_say() -> None:
    assert client_limits(CortexSettings()) == ClientLimits(10.0, 60.0, 100, 16 * 1024, 30.0)


def test_uvicorn_gets_the_guarded_protocol_in_a_form_workers_can_unpickle() -> None:
    http = _options(CortexSettings(http=HttpSettings(max_header_count=5)))["http"]
    assert isinstance(http, functools.partial)
    assert http.func is GuardedHttpProtocol
    copied = pickle.loads(pickle.dumps(http))
    assert copied.keywords["limits"].max_header_count == 5
