"""`neuraxis cortex`: serve the gateway with uvicorn."""

from __future__ import annotations

import logging
import sys

import uvicorn

from cortex.app import create_app
from cortex.config import CortexSettings


def run(settings: CortexSettings) -> int:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        # Give in-flight streams time to finish on SIGTERM.
        timeout_graceful_shutdown=30,
    )
    return 0
