"""What a check reports: a `Finding` (area, check, status, what was found,
what to do) and the `Check` type every area module implements."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from neuraxis.doctor.host import Host


class Status(StrEnum):
    OK = "ok"
    # Worth reading, but the host works: doctor still exits 0.
    WARN = "warn"
    FAIL = "fail"
    # The check does not apply to this host (the reason is in `found`).
    SKIP = "skip"


@dataclass(frozen=True)
class Finding:
    area: str
    check: str
    status: Status
    found: str
    # What to do; empty when there is nothing to do.
    advice: str = ""

    def to_dict(self) -> dict[str, str]:
        return {k: str(v) for k, v in asdict(self).items()}


# An area's checks: everything it found on the host, in the order to print.
Check = Callable[["Host"], list["Finding"]]
