"""Who a request acts for: the `Principal` the auth dependency attaches to
every `/v1/...` request, and what it may see.

With `auth = off` every request is the one anonymous principal: tenant ""
(which owns every response stored with auth off), every model, no limits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from axon.errors import ModelNotFoundError
from cortex.auth.limits import Limits


@dataclass(frozen=True)
class Principal:
    tenant: str
    key_id: str | None = None  # None: anonymous (auth off)
    models: frozenset[str] = field(default_factory=frozenset)  # empty: every model
    limits: Limits = field(default_factory=Limits)

    def may_use(self, model: str) -> bool:
        return not self.models or model in self.models

    def check_model(self, model: str) -> None:
        """A model outside the key's list is answered exactly as a model
        that does not exist (same status, code and message)."""
        if not self.may_use(model):
            raise ModelNotFoundError(f"The model '{model}' does not exist.")


ANONYMOUS = Principal(tenant="")
