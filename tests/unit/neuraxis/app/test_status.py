from __future__ import annotations

import json

from neuraxis.app.status import render, render_json

STATUS = {
    "nodes": [
        {"node_id": "a" * 40, "host": "10.0.0.21", "generation": "ada", "gpus": 2, "alive": True},
        {"node_id": "b" * 40, "host": "10.0.0.22", "generation": None, "gpus": 0, "alive": False},
    ],
    "models": [
        {
            "id": "chat",
            "desired": 2,
            "generations": ["ada", "blackwell"],
            "gpus_per_replica": 1,
            "unplaceable": None,
            "last_start_error": None,
            "replicas": [
                {
                    "id": "chat-1",
                    "state": "ready",
                    "waiting": None,
                    "address": "10.0.0.21:4000",
                    "generation": "ada",
                    "in_flight": 3,
                },
                {
                    "id": "chat-2",
                    "state": "pending",
                    "waiting": "waiting for 1 free GPU",
                    "address": None,
                    "generation": None,
                    "in_flight": None,
                },
            ],
        },
        {
            "id": "big",
            "desired": 1,
            "generations": ["hopper"],
            "gpus_per_replica": 8,
            "unplaceable": "no node of generation hopper in the cluster",
            "last_start_error": None,
            "replicas": [],
        },
    ],
    "failovers": [],
    "version": 4,
}


def test_tables_show_nodes_replicas_and_unplaceable_models() -> None:
    lines = render(STATUS).splitlines()
    assert "  10.0.0.21  ada         2     alive  aaaaaaaaaaaa" in lines
    assert "  10.0.0.22  -           0     dead   bbbbbbbbbbbb" in lines
    assert any(line.split()[:3] == ["chat", "1/2", "ada,blackwell"] for line in lines)
    ready = next(line for line in lines if "chat-1" in line).split()
    assert ready == ["chat", "chat-1", "ready", "10.0.0.21:4000", "ada", "3"]
    assert "pending (waiting for 1 free GPU)" in next(line for line in lines if "chat-2" in line)
    assert lines[lines.index("UNPLACEABLE") + 2].split(None, 1) == [
        "big",
        "no node of generation hopper in the cluster",
    ]


def test_json_is_the_status_itself() -> None:
    assert json.loads(render_json(STATUS)) == STATUS
