"""systemd unit files read as the tests check them: each `Key=value` line's
values by key, in order (a key given again adds a value, as systemd's list
settings do)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path


def unit_file_settings(path: Path) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = defaultdict(list)
    for line in path.read_text().splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings[key].append(value)
    return settings
