"""An adapter's directory as both sides check it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from axon.adapters import AdapterSourceError, check_adapter, parse_adapter, same_model


def _adapter(tmp_path: Path, rank: int = 8, base: str = "HuggingFaceTB/SmolLM2-135M") -> Path:
    (tmp_path / "adapter_config.json").write_text(
        json.dumps({"r": rank, "base_model_name_or_path": base})
    )
    return tmp_path


def test_a_good_adapter_reads_its_rank(tmp_path: Path) -> None:
    config = check_adapter(_adapter(tmp_path), 16, ("smollm2-135m",))
    assert config.rank == 8


def test_no_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AdapterSourceError, match=r"has no adapter_config\.json"):
        check_adapter(tmp_path, 16, ("m",))


def test_a_rank_above_the_maximum_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AdapterSourceError, match="rank 32 is above max_rank 16"):
        check_adapter(_adapter(tmp_path, rank=32), 16, ("smollm2-135m",))


def test_another_base_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AdapterSourceError, match="trained on 'org/other', not on 'smollm2-135m'"):
        check_adapter(_adapter(tmp_path, base="org/other"), 16, ("smollm2-135m",))


def test_a_path_a_repo_id_and_a_bundled_id_name_the_same_model() -> None:
    names = ("smollm2-135m-instruct",)
    assert same_model("/cache/models/smollm2-135m-instruct/", names)
    assert same_model("HuggingFaceTB/SmolLM2-135M-Instruct", names)
    assert not same_model("HuggingFaceTB/SmolLM2-360M-Instruct", names)


def test_id_equals_dir() -> None:
    assert parse_adapter("a=/x/y").spelled() == "a=/x/y"
    with pytest.raises(ValueError, match="not ID=DIR"):
        parse_adapter("/x/y")
