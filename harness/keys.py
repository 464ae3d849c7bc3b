"""`neuraxis keys` as an operator runs it, in this process (the same `main`
the command runs; a process start took 2-10 s on the test machine): the keys
of the stacks that run with auth = required. The command as a process beside
a running stack: tests/integration/test_console.py."""

from __future__ import annotations

import io
import subprocess
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from neuraxis.cli import main


def neuraxis_keys(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`neuraxis keys ARGS --state-dir STATE_DIR`: its exit status and output."""
    out, err = io.StringIO(), io.StringIO()
    argv = ["keys", *args, "--state-dir", str(state_dir)]
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def new_key(state_dir: Path, tenant: str, *options: str) -> str:
    """The secret of a new key of `tenant`; `options` are more `keys create`
    flags (`--rpm 5`, `--models a`)."""
    done = neuraxis_keys(state_dir, "create", "--tenant", tenant, *options)
    if done.returncode != 0:
        raise RuntimeError(f"neuraxis keys create exited {done.returncode}: {done.stderr}")
    return done.stdout.strip()
