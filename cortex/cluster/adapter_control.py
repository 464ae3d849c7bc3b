"""The admin listener's POST and DELETE /v1/adapters in cluster mode: the
change goes to the controller (controller_adapters.py), as `neuraxis
adapters add | remove` does, so that both agree and an added adapter is
served by the replicas the controller starts later too.

The controller's link is made when cortex joins the cluster (app.py's
lifespan); until then, and while the controller cannot be reached, a
change is answered 503. The controller's refusals come back as the
errors it raised (axon.errors.from_data).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ray.exceptions import RayError

from axon.errors import UnavailableError, from_data
from cortex.cluster.client import ADAPTER_CHANGE_S, ControllerLink


class ControllerAdapterControl:
    def __init__(self) -> None:
        self.link: ControllerLink | None = None

    async def add(self, model: str, adapter_id: str, source: str) -> list[str]:
        return await self._call("add_adapter", model, adapter_id, source)

    async def remove(self, adapter_id: str) -> list[str]:
        return await self._call("remove_adapter", adapter_id)

    async def _call(self, method: str, *args: str) -> list[str]:
        actor = self.link.actor if self.link is not None else None
        if actor is None:
            raise UnavailableError("the controller is not reached yet; try again")
        try:
            ref = getattr(actor, method).remote(*args)
            answer: dict[str, Any] = await asyncio.wait_for(_result(ref), ADAPTER_CHANGE_S)
        except (RayError, TimeoutError) as e:
            raise UnavailableError(f"the controller did not answer: {type(e).__name__}") from None
        if "error" in answer:
            raise from_data(answer["error"])
        return list(answer["addresses"])


async def _result(ref: Any) -> Any:
    return await ref
