"""The batch lifecycle: OpenAI's statuses, the moves allowed between them,
the timestamps each leaves, and a new batch's every field."""

from __future__ import annotations

import pytest
from openai.types import Batch

from cortex.api.batches import lifecycle


def _new() -> dict[str, object]:
    return lifecycle.new_batch("batch_1", "file-1", "/v1/embeddings", "24h", {"k": "v"}, 100)


def test_a_new_batch_has_every_field_of_the_sdks_batch() -> None:
    batch = _new()
    assert set(batch) == set(Batch.model_fields)
    Batch.model_validate(batch)
    assert batch["status"] == "validating" and batch["expires_at"] == 100 + 24 * 3600


@pytest.mark.parametrize(
    "path",
    [
        ["in_progress", "finalizing", "completed"],
        ["failed"],
        ["in_progress", "expired"],
        ["expired"],
        ["cancelling", "cancelled"],
        ["in_progress", "cancelling", "cancelled"],
    ],
)
def test_the_moves_of_openais_lifecycle(path: list[str]) -> None:
    batch = _new()
    for now, status in enumerate(path, start=200):
        batch = lifecycle.moved(batch, status, now)
        assert batch["status"] == status and batch[f"{status}_at"] == now
    Batch.model_validate(batch)


@pytest.mark.parametrize(
    ("before", "to"),
    [
        (["in_progress", "finalizing"], "cancelling"),
        (["in_progress", "finalizing", "completed"], "cancelling"),
        (["failed"], "in_progress"),
        (["cancelling"], "completed"),
        ([], "completed"),
    ],
)
def test_other_moves_are_refused(before: list[str], to: str) -> None:
    batch = _new()
    for status in before:
        batch = lifecycle.moved(batch, status, 1)
    assert not lifecycle.can_move(str(batch["status"]), to)
    with pytest.raises(lifecycle.IllegalMoveError):
        lifecycle.moved(batch, to, 2)


def test_a_move_leaves_the_original_alone_and_sets_fields() -> None:
    batch = _new()
    failed = lifecycle.moved(batch, "failed", 5, errors=lifecycle.failure("empty_file", "none", 3))
    assert batch["status"] == "validating" and batch["errors"] is None
    assert Batch.model_validate(failed).errors is not None
    assert failed["errors"]["data"][0]["line"] == 3
    counted = lifecycle.with_counts(failed, 3, 2, 1)
    assert counted["request_counts"] == {"total": 3, "completed": 2, "failed": 1}
    assert failed["request_counts"] == {"total": 0, "completed": 0, "failed": 0}
