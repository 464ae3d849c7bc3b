"""The Responses store: what is kept of each stored response, and the
interface every backend implements (sqlite.py, postgres.py; both held to
the same contract by tests/unit/cortex/store/test_contract.py).

A stored response keeps the response object as sent to the client, the
input items of its request (normalised, with ids), the id of the response
it continued and the tenant it belongs to. `previous_response_id` chains are rebuilt from these.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


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
            json.dumps(self.events),
            self.tenant,
        )

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> StoredResponse:
        """A row selected in COLUMNS order back into a record (status is
        derived from the response object, not read)."""
        return cls(
            id=row[0],
            created_at=row[1],
            previous_response_id=row[2],
            owner=row[4],
            response=json.loads(row[5]),
            input_items=json.loads(row[6]),
            events=json.loads(row[7]),
            tenant=row[8],
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
)


class ResponseStore(abc.ABC):
    backend = "unknown"  # a metrics label: "sqlite", "postgres"

    @abc.abstractmethod
    async def put(self, record: StoredResponse) -> None:
        """Store (or replace) a response. Returns once it is durable: a
        response acknowledged to a client survives a crash after this."""

    @abc.abstractmethod
    async def get(self, response_id: str) -> StoredResponse | None:
        """The response as last put, or None for an id never put or deleted."""

    @abc.abstractmethod
    async def delete(self, response_id: str) -> bool:
        """True if it existed."""

    @abc.abstractmethod
    async def running(self, owner: str) -> list[StoredResponse]:
        """Responses still queued or in progress that `owner` was running,
        oldest first."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the connection(s); harmless twice or before any use."""
