"""What a served model can do: the task decides which API endpoints may use it."""

from __future__ import annotations

from enum import Enum


class ModelTask(Enum):
    GENERATE = "generate"
    EMBED = "embed"


# The values settings and command-line choices accept.
TASK_NAMES: tuple[str, ...] = tuple(t.value for t in ModelTask)
