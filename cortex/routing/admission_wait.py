"""How long a request waited in its model's admission queue, carried from
admission (which knows when a waiter entered and left) to where the
request is accounted (cortex/api/accounting.py: the ledger's queue
seconds).

The API layer makes one per request and passes it in its route hints;
admission writes each of the request's parts' waits into it. Parts (the
prompts of one request) wait side by side, so the request waited as long
as its longest part did: the waits are not added up, which would count
the same seconds twice and could exceed the request's own time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AdmissionWait:
    seconds: float = 0.0

    def waited(self, seconds: float) -> None:
        """A part of the request left the queue after `seconds`."""
        self.seconds = max(self.seconds, seconds)
