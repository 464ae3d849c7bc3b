"""Run-time adapter changes over the applied spec: what is served, and what
is refused before anything is touched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from axon.errors import InvalidRequestError, ModelNotFoundError
from cortex.cluster.adapter_changes import (
    AdapterChanges,
    AddedAdapter,
    added_at_run_time,
    adding,
    effective,
    removing,
)
from cortex.cluster.spec import DeploymentSpec


def adapter_dir(root: Path, name: str, rank: int = 8, base: str = "") -> str:
    path = root / name
    path.mkdir()
    config = {"r": rank, "base_model_name_or_path": base}
    (path / "adapter_config.json").write_text(json.dumps(config))
    return str(path)


def model(model_id: str, lora: bool = True, **fields: Any) -> dict[str, Any]:
    return {
        "id": model_id,
        "source": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "generations": ["cpu"],
        **({"lora": {"max_rank": 16}} if lora else {}),
        **fields,
    }


def spec(*models: dict[str, Any]) -> DeploymentSpec:
    return DeploymentSpec.model_validate({"models": list(models)})


SPEC = spec(
    model("chat", adapters=[{"id": "support", "source": "/srv/support"}]),
    model("plain", lora=False),
)


def test_added_adapters_are_served_beside_the_spec_ones_and_removed_ones_are_not() -> None:
    changes = AdapterChanges(
        added=(AddedAdapter("chat", "legal", "/srv/legal"),), removed=frozenset({"support"})
    )
    served = effective(SPEC, changes)
    assert served.adapters() == {"legal": "chat"}
    assert [a.source for a in served.models[0].adapters] == ["/srv/legal"]
    # The applied spec itself is left as it was.
    assert SPEC.adapters() == {"support": "chat"}


def test_a_spec_entry_wins_over_an_added_adapter_of_the_same_id() -> None:
    changes = AdapterChanges(added=(AddedAdapter("chat", "support", "/srv/other"),))
    [served] = effective(SPEC, changes).models[0].adapters
    assert served.source == "/srv/support"


def test_an_added_adapter_whose_model_left_the_spec_is_kept_unserved() -> None:
    changes = AdapterChanges(added=(AddedAdapter("gone", "legal", "/srv/legal"),))
    assert "legal" not in effective(SPEC, changes).adapters()
    # Served again once its model is back in an applied spec.
    back = spec(model("chat"), model("gone"))
    assert effective(back, changes).adapters() == {"legal": "gone"}


def test_adding_a_good_source_records_it(tmp_path: Path) -> None:
    source = adapter_dir(tmp_path, "legal", base="HuggingFaceTB/SmolLM2-135M-Instruct")
    changes = adding(SPEC, AdapterChanges(), "chat", "legal", source)
    assert changes.added == (AddedAdapter("chat", "legal", source),)
    assert effective(SPEC, changes).adapters() == {"support": "chat", "legal": "chat"}
    assert added_at_run_time(SPEC, changes, "legal")
    assert not added_at_run_time(SPEC, changes, "support")


@pytest.mark.parametrize(
    ("model_id", "adapter_id", "make", "error", "param", "says"),
    [
        ("nope", "a", "good", ModelNotFoundError, "model", "not in the deployment spec"),
        ("plain", "a", "good", InvalidRequestError, "model", "no [models.lora]"),
        ("chat", "plain", "good", InvalidRequestError, "id", "already a model's id"),
        ("chat", "support", "good", InvalidRequestError, "id", "already a model's id"),
        ("chat", "a=b", "good", InvalidRequestError, "id", "cannot be an adapter's id"),
        ("chat", "a", "relative", InvalidRequestError, "source", "not an absolute path"),
        ("chat", "a", "missing", InvalidRequestError, "source", "has no adapter_config.json"),
        ("chat", "a", "rank", InvalidRequestError, "source", "rank 32 is above max_rank 16"),
        ("chat", "a", "base", InvalidRequestError, "source", "was trained on 'Qwen/Qwen3-0.6B'"),
    ],
)
def test_a_change_that_cannot_be_served_is_refused_with_the_reason(
    tmp_path: Path,
    model_id: str,
    adapter_id: str,
    make: str,
    error: type[Exception],
    param: str,
    says: str,
) -> None:
    sources = {
        "good": adapter_dir(tmp_path, "good"),
        "relative": "adapters/good",
        "missing": str(tmp_path / "missing"),
        "rank": adapter_dir(tmp_path, "rank", rank=32),
        "base": adapter_dir(tmp_path, "base", base="Qwen/Qwen3-0.6B"),
    }
    with pytest.raises(error) as raised:
        adding(SPEC, AdapterChanges(), model_id, adapter_id, sources[make])
    assert says in str(raised.value)
    assert getattr(raised.value, "param", None) == param


def test_removing_an_added_adapter_forgets_it_and_a_spec_one_is_remembered_as_removed(
    tmp_path: Path,
) -> None:
    source = adapter_dir(tmp_path, "legal")
    changes = adding(SPEC, AdapterChanges(), "chat", "legal", source)
    changes, parent = removing(SPEC, changes, "legal")
    assert (changes, parent) == (AdapterChanges(), "chat")
    changes, parent = removing(SPEC, changes, "support")
    assert changes.removed == {"support"} and parent == "chat"
    assert effective(SPEC, changes).adapters() == {}
    with pytest.raises(ModelNotFoundError, match="'support' does not exist"):
        removing(SPEC, changes, "support")


def test_a_removed_spec_adapter_can_be_added_again_from_another_source(tmp_path: Path) -> None:
    changes, _ = removing(SPEC, AdapterChanges(), "support")
    source = adapter_dir(tmp_path, "support2")
    changes = adding(SPEC, changes, "chat", "support", source)
    [served] = effective(SPEC, changes).models[0].adapters
    assert (served.id, served.source) == ("support", source)
    assert added_at_run_time(SPEC, changes, "support")


def test_the_changes_survive_their_plain_data_form() -> None:
    changes = AdapterChanges(
        added=(AddedAdapter("chat", "legal", "/srv/legal"),), removed=frozenset({"support"})
    )
    assert AdapterChanges.from_data(json.loads(json.dumps(changes.to_data()))) == changes
