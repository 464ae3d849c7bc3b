"""What admission's tests share: the free slots the pool would report, set
by the test, and the rejections counted at /metrics."""

from __future__ import annotations

from prometheus_client import REGISTRY


class Slots:
    """What the pool would say: free slots per model (None: no cap)."""

    def __init__(self, free: int | None) -> None:
        self.free = free

    def __call__(self, model: str) -> int | None:
        return self.free


def rejections(model: str, reason: str) -> float:
    labels = {"model": model, "reason": reason}
    return REGISTRY.get_sample_value("neuraxis_admission_rejections_total", labels) or 0.0
