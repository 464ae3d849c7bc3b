"""A child's output on a pseudo-terminal, as a person at a terminal sees it:
`neuraxis up` prints progress lines (and hides cortex's logs) only when its
output is a terminal. A thread reads the terminal as the child writes,
keeps the text for the test and copies it to the child's log file, so that
a failure's log tail reads the same as for any other child."""

from __future__ import annotations

import os
import pty
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path


class Terminal:
    """The parent's end of a pseudo-terminal; `slave` is for the child."""

    def __init__(self, log_path: Path) -> None:
        self._master, self.slave = pty.openpty()
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed by the reader
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read_forever, daemon=True)

    def start(self) -> None:
        """Once the child holds the slave end: ours is closed so that the
        reader sees EIO when every writer has gone."""
        os.close(self.slave)
        self._reader.start()

    def _read_forever(self) -> None:
        try:
            while True:
                try:
                    data = os.read(self._master, 4096)
                except OSError:  # EIO: every writer has gone
                    return
                if not data:
                    return
                with self._lock:
                    self._chunks.append(data)
                self._log.write(data)
                self._log.flush()
        finally:
            self._log.close()
            os.close(self._master)

    def join(self, timeout: float = 10) -> None:
        self._reader.join(timeout)

    def text(self) -> str:
        with self._lock:
            return b"".join(self._chunks).decode(errors="replace").replace("\r\n", "\n")

    def wait_for(self, pattern: str, timeout: float, alive: Callable[[], bool]) -> str:
        """The text once `pattern` (a multi-line regex) is in it; fails with
        the text's end after `timeout`, or moments after the child has gone."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            if re.search(pattern, text, re.MULTILINE):
                return text
            if not alive():
                # Gone: what it wrote last is read within moments.
                deadline = min(deadline, time.monotonic() + 2)
            time.sleep(0.2)
        raise AssertionError(f"no {pattern!r} on the terminal:\n{self.text()[-4000:]}")
