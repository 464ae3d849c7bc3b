"""NeuronClient against a port where nothing listens: what it logs."""

from __future__ import annotations

import asyncio
import logging

import pytest

from axon.errors import UnavailableError
from cortex.routing.client import NeuronClient
from harness.ports import free_port


def test_an_unreachable_neuron_is_warned_about_once_not_at_every_poll(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def poll_three_times() -> None:
        client = NeuronClient(f"127.0.0.1:{free_port()}")
        try:
            for _ in range(3):
                with pytest.raises(UnavailableError):
                    await client.info(timeout=2)
        finally:
            await client.close()

    with caplog.at_level(logging.DEBUG, logger="neuraxis.cortex"):
        asyncio.run(poll_three_times())
    said = [r for r in caplog.records if "is unreachable" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
