"""What the APIs of stored objects (Responses, Files, Batches) share: an
object is its tenant's alone, and their lists come in OpenAI's page shape."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from fastapi import Request

from axon.errors import NotFoundError
from cortex.http.context import context_of


class _Owned(Protocol):
    @property
    def tenant(self) -> str: ...


_T = TypeVar("_T", bound=_Owned)


def owned(request: Request, record: _T | None, missing: NotFoundError) -> _T:
    """`record` if the caller's tenant owns it. Another tenant's object
    answers `missing`, as one that does not exist: its id says nothing."""
    if record is None or record.tenant != context_of(request).principal.tenant:
        raise missing
    return record


def list_page(objects: list[dict[str, Any]], limit: int) -> dict[str, Any]:
    """OpenAI's list object of a page: `objects` is up to `limit + 1` of
    them (or all of them), those past the page only saying that there are more."""
    data = objects[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(objects) > limit,
    }
