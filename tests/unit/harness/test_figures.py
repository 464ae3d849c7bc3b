from __future__ import annotations

import json
from pathlib import Path

from harness.figures import recorded_figures


def test_what_the_block_records_is_written_when_it_ends(tmp_path: Path) -> None:
    path = tmp_path / "figures.json"
    with recorded_figures(path) as found:
        found["failover_s"] = 1.5
        assert not path.exists()
    assert json.loads(path.read_text()) == {"failover_s": 1.5}
