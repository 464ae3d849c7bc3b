"""`neuraxis cortex`: serve the gateway with uvicorn."""

from __future__ import annotations

import uvicorn

from cortex.app import create_app
from cortex.config import CortexSettings
from neuraxis.logs import configure_logging


def run(settings: CortexSettings) -> int:
    configure_logging()
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
