"""`neuraxis adapters add | remove | list`: the arguments, what is sent to
the controller, how its answers and refusals are said."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import cortex.cluster.client as client
from axon.errors import InvalidRequestError
from neuraxis.cli import build_parser, main
from neuraxis.commands.adapters import render

LISTED: dict[str, Any] = {
    "adapters": [
        {
            "id": "legal",
            "model": "chat",
            "source": "/srv/legal",
            "added_at_run_time": True,
            "replicas": ["chat-1", "chat-2"],
            "held_by": ["chat-2"],
        },
        {
            "id": "support",
            "model": "chat",
            "source": "/srv/support",
            "added_at_run_time": False,
            "replicas": [],
            "held_by": [],
        },
    ],
    "unreachable": ["chat-3"],
}


def test_the_arguments_of_each_command() -> None:
    parser = build_parser()
    add = parser.parse_args(["adapters", "add", "chat", "legal", "/srv/legal", "--address", "h:1"])
    assert (add.adapters_command, add.model, add.id, add.source, add.address) == (
        "add",
        "chat",
        "legal",
        Path("/srv/legal"),
        "h:1",
    )
    remove = parser.parse_args(["adapters", "remove", "legal"])
    assert (remove.adapters_command, remove.id, remove.address) == ("remove", "legal", None)
    assert parser.parse_args(["adapters", "list", "--json"]).json is True
    with pytest.raises(SystemExit):
        parser.parse_args(["adapters", "add", "chat", "legal"])  # no SOURCE


class Controller:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[tuple[str, ...]] = []
        monkeypatch.setattr(
            client, "connect", lambda address: self.sent.append(("connect", address))
        )
        monkeypatch.setattr(client, "add_adapter", self.add)
        monkeypatch.setattr(client, "remove_adapter", self.remove)
        monkeypatch.setattr(client, "list_adapters", lambda: LISTED)

    def add(self, model: str, adapter_id: str, source: str) -> dict[str, Any]:
        self.sent.append(("add", model, adapter_id, source))
        if adapter_id == "big":
            raise InvalidRequestError(f"{source}: rank 32 is above max_rank 16", param="source")
        return {"replicas": ["chat-1"], "pending": {"chat-2": "not answering"}}

    def remove(self, adapter_id: str) -> dict[str, Any]:
        self.sent.append(("remove", adapter_id))
        return {"model": "chat", "replicas": ["chat-1", "chat-2"], "pending": {}}


def test_add_sends_an_absolute_source_and_says_which_replicas_were_told(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    controller = Controller(monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert main(["adapters", "add", "chat", "legal", "legal-dir", "--address", "h:1"]) == 0
    assert controller.sent == [
        ("connect", "h:1"),
        ("add", "chat", "legal", f"{tmp_path}/legal-dir"),
    ]
    said = capsys.readouterr().out
    assert "adapter legal of chat added: chat-1; chat-2 later (not answering)" in said


def test_a_refusal_is_said_and_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    Controller(monkeypatch)
    assert main(["adapters", "add", "chat", "big", "/srv/big", "--address", "h:1"]) == 1
    assert capsys.readouterr().err == "neuraxis: /srv/big: rank 32 is above max_rank 16\n"


def test_remove_says_where_it_was_unloaded(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    controller = Controller(monkeypatch)
    assert main(["adapters", "remove", "legal", "--address", "h:1"]) == 0
    assert controller.sent[-1] == ("remove", "legal")
    assert "adapter legal of chat removed: chat-1, chat-2" in capsys.readouterr().out


def test_list_prints_a_table() -> None:
    assert render(LISTED).splitlines() == [
        "ADAPTER  MODEL  ADDED     SERVED BY      HELD BY  SOURCE",
        "legal    chat   run time  chat-1,chat-2  chat-2   /srv/legal",
        "support  chat   spec      -              -        /srv/support",
        "not answering (not counted): chat-3",
    ]
