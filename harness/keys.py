"""API keys made as an operator makes them (`neuraxis keys create`), in this
process: for the stacks that run with auth = required."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from neuraxis.cli import main


def new_key(state_dir: Path, tenant: str, *options: str) -> str:
    """The secret of a new key of `tenant` in the state directory; `options`
    are more `keys create` flags (`--rpm 5`, `--models a`)."""
    out, err = io.StringIO(), io.StringIO()
    argv = ["keys", "create", "--tenant", tenant, *options, "--state-dir", str(state_dir)]
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    if code != 0:
        raise RuntimeError(f"neuraxis keys create exited {code}: {err.getvalue()}")
    return out.getvalue().strip()
