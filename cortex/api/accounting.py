"""What a finished request adds to its tenant's accounts: a row of the
usage ledger (cortex/store/ledger.py) and, with metrics_tenant_label, the
per-tenant token counters. The request's tracker (lifecycle.py) calls the
`Account` made here once, when the request ends.

The class is the one the request asked for, capped by its tenant's
ceiling as admission caps it (dispatch passes it; embeddings ask for none:
default). The queue seconds are what admission told the request's
`AdmissionWait` (cortex/routing/admission_wait.py): 0 for a request that
found a free slot.
"""

from __future__ import annotations

from axon.priority import DEFAULT_CLASS, PriorityClass
from cortex import metrics
from cortex.api.lifecycle import Account
from cortex.auth.principal import Principal
from cortex.recording import Ended
from cortex.routing.admission_wait import AdmissionWait
from cortex.store.ledger import Ledger
from cortex.store.tenants import UsageCounts, UsageKey, hour_of

# The outcomes the ledger counts as errors: a cancelled request is the
# client's choice, not a failure.
ERRORS = frozenset({"client_error", "server_error"})


def account_for(
    principal: Principal,
    model: str,
    ledger: Ledger | None,
    tenant_tokens: bool,
    priority: PriorityClass = DEFAULT_CLASS,
    waited: AdmissionWait | None = None,
) -> Account | None:
    """The account of a request of `principal` for `model` in class
    `priority`, which spent `waited` in the admission queue (None: nothing
    to add to)."""
    if ledger is None and not tenant_tokens:
        return None
    tenant, key_id = principal.tenant, principal.key_id or ""

    def account(end: Ended, cached: int) -> None:
        if ledger is not None:
            key = UsageKey(tenant, key_id, model, priority, hour_of(ledger.clock()))
            error = int(end.outcome in ERRORS)
            queue_s = waited.seconds if waited is not None else 0.0
            counts = UsageCounts(
                1, end.prompt_tokens, cached, end.output_tokens, error, end.seconds, queue_s
            )
            ledger.add(key, counts)
        if tenant_tokens:
            # The model as a metric label (end.model: a served or
            # configured id, else "unknown"), as every request metric has it.
            metrics.record_tenant_tokens(
                tenant, end.model, end.prompt_tokens, cached, end.output_tokens
            )

    return account
