"""Figures a test module measures (failover times, counts) and leaves in the
logs directory as JSON, for the notes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def recorded_figures(path: Path) -> Iterator[dict[str, Any]]:
    """A dict the tests fill in, written to `path` when the block ends."""
    found: dict[str, Any] = {}
    yield found
    path.write_text(json.dumps(found, indent=2))
