"""A batch's lifecycle, as OpenAI's: the statuses, the moves between them
and the Batch object each move leaves (pure; the runner makes the moves).

```
validating ──► in_progress ──► finalizing ──► completed
    │  │            │  │
    │  │            │  └──► expired      (the window ended: lines left fail)
    │  └────────────┴─────► cancelling ──► cancelled
    └──► failed    (the input file cannot run: errors.data says why)
```

A move stamps its `<status>_at`. A batch in validating or in_progress may
also expire; a cancel is refused once it is finalizing or has ended.
"""

from __future__ import annotations

import copy
from typing import Any

WINDOWS = {"24h": 24 * 3600}
TERMINAL = ("completed", "failed", "expired", "cancelled")
_MOVES = {
    "validating": ("in_progress", "failed", "cancelling", "expired"),
    "in_progress": ("finalizing", "cancelling", "expired"),
    "finalizing": ("completed",),
    "cancelling": ("cancelled",),
}


class IllegalMoveError(ValueError):
    pass


def new_batch(
    batch_id: str,
    input_file_id: str,
    endpoint: str,
    window: str,
    metadata: dict[str, str] | None,
    now: int,
) -> dict[str, Any]:
    """A new Batch object, validating, with every field of OpenAI's (null
    where unset)."""
    return {
        "id": batch_id,
        "object": "batch",
        "endpoint": endpoint,
        "errors": None,
        "input_file_id": input_file_id,
        "completion_window": window,
        "status": "validating",
        "output_file_id": None,
        "error_file_id": None,
        "created_at": now,
        "in_progress_at": None,
        "expires_at": now + WINDOWS[window],
        "finalizing_at": None,
        "completed_at": None,
        "failed_at": None,
        "expired_at": None,
        "cancelling_at": None,
        "cancelled_at": None,
        "request_counts": {"total": 0, "completed": 0, "failed": 0},
        "metadata": metadata,
        "model": None,
        "usage": None,
    }


def can_move(status: str, to: str) -> bool:
    return to in _MOVES.get(status, ())


def moved(batch: dict[str, Any], to: str, now: int, **fields: Any) -> dict[str, Any]:
    """The batch moved to `to` at `now`, with `fields` set (a copy)."""
    if not can_move(batch["status"], to):
        raise IllegalMoveError(f"a batch cannot go from {batch['status']} to {to}")
    out = copy.deepcopy(batch)
    out.update(fields)
    out["status"] = to
    out[f"{to}_at"] = now
    return out


def with_counts(batch: dict[str, Any], total: int, completed: int, failed: int) -> dict[str, Any]:
    out = copy.deepcopy(batch)
    out["request_counts"] = {"total": total, "completed": completed, "failed": failed}
    return out


def failure(code: str, message: str, line: int | None = None) -> dict[str, Any]:
    """The `errors` of a batch that failed validation."""
    return {
        "object": "list",
        "data": [{"code": code, "message": message, "param": None, "line": line}],
    }


def usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }
