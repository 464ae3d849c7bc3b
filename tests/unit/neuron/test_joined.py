"""Finding this host's raylet (and so its node id) among a process group,
from a /proc of the test's own."""

from __future__ import annotations

from pathlib import Path

from neuron.joined import raylet_node_id

NODE = "2331c0dafe7895020bf024eb299a83213055cd450cab683cc5fdc28f"


def _process(proc: Path, pid: int, comm: str, pgrp: int, args: list[str]) -> None:
    d = proc / str(pid)
    d.mkdir()
    (d / "stat").write_text(f"{pid} ({comm}) S 1 {pgrp} {pgrp} 0 -1 4194560 0 0\n")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in args) + b"\0")


def test_the_raylet_of_the_group_names_the_node(tmp_path: Path) -> None:
    raylet = "/opt/ray/core/src/ray/raylet/raylet"
    _process(tmp_path, 10, "ray", 10, ["/usr/bin/python", "ray", "start", "--block"])
    # Another node's raylet on this host (another group) is not ours.
    _process(tmp_path, 11, "raylet", 99, [raylet, "--node_id=" + "f" * 56])
    _process(tmp_path, 12, "raylet", 10, [raylet, "--raylet_socket_name=/x", f"--node_id={NODE}"])
    # A command name with a space and a parenthesis does not confuse the parse.
    _process(tmp_path, 13, "odd) name", 10, ["/bin/odd"])
    (tmp_path / "self").mkdir()  # not a process
    assert raylet_node_id(10, tmp_path) == NODE


def test_no_raylet_yet(tmp_path: Path) -> None:
    _process(tmp_path, 10, "ray", 10, ["/usr/bin/python", "ray", "start", "--block"])
    assert raylet_node_id(10, tmp_path) is None
