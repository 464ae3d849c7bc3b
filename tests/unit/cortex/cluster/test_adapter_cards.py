"""The controller's adapter list as the admin listener's cards (cluster
mode's GET /v1/adapters)."""

from __future__ import annotations

from typing import Any

import pytest

from cortex.cluster.adapter_cards import adapter_cards

# As controller_adapters.listing answers: replicas by id, and their addresses.
LISTED: dict[str, Any] = {
    "adapters": [
        {
            "id": "support",
            "model": "chat",
            "source": "/srv/support",
            "added_at_run_time": False,
            "replicas": ["chat-2", "chat-1"],
            "held_by": ["chat-2"],
        },
        {
            "id": "legal",
            "model": "chat",
            "source": "/srv/legal",
            "added_at_run_time": True,
            # Its base scaled to zero: no replica serves it yet.
            "replicas": [],
            "held_by": [],
        },
    ],
    "unreachable": [],
    "addresses": {"chat-1": "10.0.0.21:50051", "chat-2": "10.0.0.22:50051"},
}


def test_every_adapter_served_with_its_source_origin_and_replicas_by_address() -> None:
    assert [c.model_dump() for c in adapter_cards(LISTED)] == [
        {
            "id": "legal",
            "object": "adapter",
            "parent": "chat",
            "held_by": [],
            "source": "/srv/legal",
            "origin": "run-time",
            "served_by": [],
        },
        {
            "id": "support",
            "object": "adapter",
            "parent": "chat",
            "held_by": ["10.0.0.22:50051"],
            "source": "/srv/support",
            "origin": "spec",
            "served_by": ["10.0.0.21:50051", "10.0.0.22:50051"],
        },
    ]


def test_an_answer_of_another_form_is_refused() -> None:
    with pytest.raises(KeyError):
        adapter_cards({"adapters": [], "unreachable": []})  # an older controller's
