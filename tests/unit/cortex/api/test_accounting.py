"""What a finished request adds to its tenant's accounts: the ledger row of
its tenant, key, model, class and hour, errors apart from cancellations,
and the per-tenant token counters only when asked for."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import REGISTRY

from cortex.api.accounting import account_for
from cortex.auth.principal import ANONYMOUS, Principal
from cortex.recording import Ended
from cortex.routing.admission_wait import AdmissionWait
from cortex.store.ledger import Ledger
from cortex.store.sqlite_tenants import SqliteTenantStore
from cortex.store.tenants import HOUR_S, UsageCounts, UsageKey
from harness.clock import ManualClock


def _ended(outcome: str = "success", prompt: int = 10, output: int = 4) -> Ended:
    return Ended("chat", "m1", outcome, 0.5, prompt, output, had_output=True)


async def test_requests_add_up_by_tenant_key_model_and_hour(tmp_path: Path) -> None:
    clock = ManualClock(now=3 * HOUR_S + 10, epoch=0)
    store = SqliteTenantStore(tmp_path / "responses.sqlite3")
    ledger = Ledger(store, flush_s=2.0, clock=clock.time)
    principal = Principal(tenant="acme", key_id="key_a")
    account = account_for(principal, "m1", ledger, tenant_tokens=False)
    assert account is not None
    account(_ended(), 3)
    account(_ended("server_error", 10, 0), 0)
    account(_ended("cancelled", 0, 0), 0)
    clock.now += HOUR_S  # the next hour's row
    account(_ended(), 0)
    anonymous = account_for(ANONYMOUS, "m1", ledger, tenant_tokens=False, priority="batch")
    assert anonymous is not None
    anonymous(_ended(), 0)
    await ledger.flush()
    pending = dict(await store.usage(0, 10 * HOUR_S))
    await store.close()
    hour = UsageKey("acme", "key_a", "m1", "default", 3 * HOUR_S)
    assert pending[hour] == UsageCounts(3, 20, 3, 4, 1, 1.5, 0.0)
    assert pending[UsageKey("acme", "key_a", "m1", "default", 4 * HOUR_S)].requests == 1
    assert pending[UsageKey("", "", "m1", "batch", 4 * HOUR_S)].requests == 1


async def test_a_request_adds_its_time_in_the_admission_queue(tmp_path: Path) -> None:
    clock = ManualClock(now=HOUR_S, epoch=0)
    store = SqliteTenantStore(tmp_path / "responses.sqlite3")
    ledger = Ledger(store, flush_s=2.0, clock=clock.time)
    principal = Principal(tenant="acme", key_id="key_a")
    for seconds in (0.0, 0.25, 1.5):
        waited = AdmissionWait()
        waited.waited(seconds)
        account = account_for(principal, "m1", ledger, tenant_tokens=False, waited=waited)
        assert account is not None
        account(_ended(), 0)
    await ledger.flush()
    rows = dict(await store.usage(0, 10 * HOUR_S))
    await store.close()
    row = rows[UsageKey("acme", "key_a", "m1", "default", HOUR_S)]
    assert (row.requests, row.queue_s, row.total_s) == (3, 1.75, 1.5)


def test_tenant_token_counters_only_when_asked() -> None:
    assert account_for(Principal(tenant="t"), "m1", None, tenant_tokens=False) is None
    account = account_for(Principal(tenant="acct-metric"), "m1", None, tenant_tokens=True)
    assert account is not None
    account(_ended(prompt=7, output=2), 5)

    def count(kind: str) -> float | None:
        labels = {"tenant": "acct-metric", "model": "m1", "kind": kind}
        return REGISTRY.get_sample_value("neuraxis_tenant_tokens_total", labels)

    assert (count("prompt"), count("cached"), count("output")) == (7.0, 5.0, 2.0)
