"""A closed-loop load of streamed chat requests through cortex, recording for
each request whether it got its first token, finished, or ended with an
error event: the client side of the failover tests and benchmark."""

from __future__ import annotations

import threading
import time

import httpx

from harness.streamed_chat import CHAT_PATH, StreamedChat, hello_chat, read_sync

# The failover tests' name for what one request of the load saw.
Outcome = StreamedChat


def stream_once(client: httpx.Client, model: str, max_tokens: int) -> Outcome:
    return read_sync(client, CHAT_PATH, hello_chat(model, max_tokens))


class Load:
    """`clients` threads sending streamed requests back to back until stopped."""

    def __init__(self, base_url: str, model: str, clients: int, max_tokens: int = 10) -> None:
        self.outcomes: list[Outcome] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(base_url, model, max_tokens), daemon=True)
            for _ in range(clients)
        ]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)

    def _run(self, base_url: str, model: str, max_tokens: int) -> None:
        with httpx.Client(base_url=base_url, timeout=60) as client:
            while not self._stop.is_set():
                outcome = stream_once(client, model, max_tokens)
                with self._lock:
                    self.outcomes.append(outcome)
                if outcome.error is not None and not outcome.first_token:
                    time.sleep(0.05)  # refused at once (a cortex down): not a busy loop

    def count(self) -> int:
        with self._lock:
            return len(self.outcomes)

    def wait_for(self, more: int, timeout: float = 120) -> None:
        """Until `more` further requests have ended (a stuck load fails the
        run instead of hanging it)."""
        target = self.count() + more
        deadline = time.monotonic() + timeout
        while self.count() < target:
            if time.monotonic() > deadline:
                raise AssertionError(f"{more} requests did not end in {timeout} s")
            time.sleep(0.02)

    def summary(self, since: float = 0.0, until: float = float("inf")) -> dict[str, int]:
        """Counts of the requests that started in [since, until)."""
        with self._lock:
            done = [o for o in self.outcomes if since <= o.started_at < until]
        return {
            "requests": len(done),
            "completed": sum(o.finished for o in done),
            "failed_before_first_token": sum(
                1 for o in done if not o.finished and not o.first_token
            ),
            "failed_mid_stream": sum(1 for o in done if not o.finished and o.first_token),
        }
