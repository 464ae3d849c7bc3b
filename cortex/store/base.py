"""The Responses store: what is kept of each stored response, and the
interface every backend implements (sqlite.py, postgres.py; both held to
the same contract by tests/contract/cortex/store/test_contract.py).

A stored response keeps the response object as sent to the client, the
input items of its request (normalised, with ids), the id of the response
it continued and the tenant it belongs to. `previous_response_id` chains are rebuilt from these.

A response still running carries a lease: the instance running it (`owner`,
one id per process) renews `lease_until` while it runs; once it has expired,
any instance may end the response as failed (cortex/api/responses/upkeep.py).
A deleted response leaves a tombstone (status "deleted", nothing else
kept) that reads as missing and that no later `put` overwrites, so a run
that ends after its response was deleted never brings it back. The events of
a finished response are stored compacted (compact.py).
"""

from __future__ import annotations

import abc
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cortex.store import compact

# The statuses of a response that has not ended.
RUNNING = ("queued", "in_progress")
# The status of a deleted response's tombstone.
DELETED = "deleted"


@dataclass(frozen=True)
class StoredResponse:
    id: str
    created_at: int
    previous_response_id: str | None
    response: dict[str, Any]  # the Response object, as the client saw it
    input_items: list[dict[str, Any]]  # the request's input items, with ids
    # The stream events so far (type, payload with sequence_number), for
    # GET ?stream=true replays.
    events: list[dict[str, Any]] = field(default_factory=list)
    # The cortex instance running it (background responses), e.g. "host:port".
    owner: str = ""
    # The tenant whose API key made it ("" with auth off: the one anonymous
    # tenant). Nobody else can read, continue, cancel or delete it.
    tenant: str = ""
    # Until when (epoch seconds) the owner's lease on a running response
    # holds; 0: no lease (a response that is not running, or stored by an
    # older version).
    lease_until: float = 0.0

    @property
    def status(self) -> str:
        return str(self.response.get("status", ""))

    def to_row(self) -> tuple[Any, ...]:
        """The record as a table row, in COLUMNS order (JSON as text)."""
        return (
            self.id,
            self.created_at,
            self.previous_response_id,
            self.status,
            self.owner,
            json.dumps(self.response),
            json.dumps(self.input_items),
            json.dumps(self._stored_events()),
            self.tenant,
            self.lease_until,
        )

    def _stored_events(self) -> Any:
        if self.status in RUNNING:
            return self.events  # still growing: compacted when it ends
        return compact.compact(self.events, self.response)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> StoredResponse:
        """A row selected in COLUMNS order back into a record (status is
        derived from the response object, not read)."""
        response = json.loads(row[5])
        return cls(
            id=row[0],
            created_at=row[1],
            previous_response_id=row[2],
            owner=row[4],
            response=response,
            input_items=json.loads(row[6]),
            events=compact.expand(json.loads(row[7]), response),
            tenant=row[8],
            lease_until=float(row[9]),
        )


# Every backend's table has these columns; rows are read and written in this order.
COLUMNS = (
    "id",
    "created_at",
    "previous_response_id",
    "status",
    "owner",
    "response",
    "input_items",
    "events",
    "tenant",
    "lease_until",
)


class ResponseStore(abc.ABC):
    backend = "unknown"  # a metrics label: "sqlite", "postgres"

    @abc.abstractmethod
    async def put(self, record: StoredResponse) -> bool:
        """Store (or replace) a response. Returns once it is durable: a
        response acknowledged to a client survives a crash after this.
        False (nothing written) if the response was deleted."""

    @abc.abstractmethod
    async def get(self, response_id: str) -> StoredResponse | None:
        """The response as last put, or None for an id never put or deleted."""

    @abc.abstractmethod
    async def delete(self, response_id: str) -> bool:
        """True if it existed. What stays is a tombstone no `put` replaces."""

    @abc.abstractmethod
    async def running_under(self, prefix: str) -> list[StoredResponse]:
        """Responses still running whose owner starts with `prefix` (the
        processes of one host:port), oldest first."""

    @abc.abstractmethod
    async def renew(self, owner: str, ids: Sequence[str], until: float) -> set[str]:
        """Extend to `until` the leases of `owner`'s responses `ids`; returns
        those still running (the others were deleted or ended elsewhere:
        their runs should stop)."""

    @abc.abstractmethod
    async def expired(self, now: float) -> list[StoredResponse]:
        """Running responses whose lease ended before `now`, oldest first."""

    @abc.abstractmethod
    async def purge(self, before: int, batch: int = 10_000) -> int:
        """Delete the responses (tombstones included) created before `before`
        (epoch seconds), `batch` rows per statement; returns how many."""

    @abc.abstractmethod
    async def claim(self, job: str, holder: str, now: float, until: float) -> bool:
        """Take or keep the lease of a periodic job (a purge) until `until`:
        True if `holder` has it, i.e. nobody else held it past `now`."""

    @abc.abstractmethod
    async def running(self, owner: str) -> list[StoredResponse]:
        """Responses still queued or in progress that `owner` was running,
        oldest first."""

    @abc.abstractmethod
    async def stored_bytes(self, tenant: str | None = None) -> int:
        """Bytes the responses of `tenant` (None: every tenant's) take in
        the store: their JSON, as the backend keeps it."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the connection(s); harmless twice or before any use."""


async def in_batches(delete: Callable[[], Awaitable[int]], batch: int) -> int:
    """Run `delete` (one batch of at most `batch` rows deleted) until a batch
    comes back short; the rows deleted in all."""
    total = 0
    while True:
        count = await delete()
        total += count
        if count < batch:
            return total
