"""How `make test` spreads the suite over pytest-xdist workers.

Each test module goes to one worker whole (xdist's loadscope: a module's
fixtures start once), and every module that runs a real vLLM engine goes to
the same worker, one after the other: one engine fills both cores of the
machines this project runs on, and the session's shared stack (`stack`,
tests/conftest.py) starts once. A module runs an engine when a test or a
fixture in it takes the `stack` fixture, or when it is marked `engine` (it
starts an engine of its own).

The controller never collects, so the modules are found by reading the
test files' syntax, not by asking pytest.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

ENGINE_SCOPE = "engine"


def _takes_stack(node: ast.AST) -> bool:
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    fixture = any("fixture" in ast.unparse(d) for d in node.decorator_list)
    if not (node.name.startswith("test_") or fixture):
        return False
    return any(a.arg == "stack" for a in node.args.args)


def engine_modules(root: Path) -> set[str]:
    """The node-id prefixes (paths relative to `root`) of the test modules
    that run a real vLLM engine."""
    found = set()
    for path in sorted((root / "tests").rglob("test_*.py")):
        source = path.read_text()
        tree = ast.parse(source)
        if "pytest.mark.engine" in source or any(_takes_stack(n) for n in ast.walk(tree)):
            found.add(path.relative_to(root).as_posix())
    return found


class EngineScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
    """loadscope, with every engine module in one scope."""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self._engine = engine_modules(config.rootpath)

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return ENGINE_SCOPE if module in self._engine else super()._split_scope(nodeid)
