"""The one attempt loop, driven with attempts of the test's own: what a
failure before and after the first item means, and the counts each attempt
leaves. The generate and embed attempts themselves are tested through the
pool (test_pool.py, test_pool_faults.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from axon import tracing
from axon.errors import InvalidRequestError, RequestTooLargeError, UnavailableError
from axon.grpc_limits import MAX_MESSAGE_BYTES
from axon.v1 import neuron_pb2 as pb
from cortex.routing.admission import AdmissionControl, AdmissionOptions
from cortex.routing.attempts import Attempts
from cortex.routing.client import Metadata
from cortex.routing.deadlines import Deadlines, RequestDeadline
from cortex.routing.ejection import EjectionOptions, OutlierEjection
from cortex.routing.least_outstanding import LeastOutstanding
from cortex.routing.policy import RouteHints
from cortex.routing.pool_settings import PoolSettings
from cortex.routing.retry_budget import RetryBudget
from cortex.routing.roster import NeuronState, Roster
from tests.unit.cortex.routing.fakes import DONE, FakeNeuron, Fleet
from tests.unit.traced import spans

__all__ = ["spans"]


async def _attempts(*addresses: str) -> tuple[Attempts, Roster]:
    roster = Roster(
        [FakeNeuron(a) for a in addresses],
        ["m"],
        client_factory=Fleet(),
        policy_for=lambda _model: LeastOutstanding(),
        clock=lambda: 100.0,
        admission=AdmissionOptions(),
        on_refresh=lambda: None,
        settings=PoolSettings(poll_interval_s=60.0, load_interval_s=60.0),
    )
    await roster.refresh()
    admission = AdmissionControl(
        AdmissionOptions(), roster.free_slots, lambda: 100.0, asyncio.sleep
    )
    attempts = Attempts(
        roster,
        admission,
        lambda _model: LeastOutstanding(),
        clock=lambda: 100.0,
        deadlines=Deadlines(first_token_s=5.0, idle_s=5.0, total_s=5.0),
        ejection=OutlierEjection(EjectionOptions(), lambda: 100.0),
        budget=RetryBudget(None),
        max_retries=1,
    )
    return attempts, roster


REQUEST = pb.EmbedRequest(request_id="req-1", model="m")


class _Scripted:
    """An attempt of the test's own: each try records its neuron, then plays
    its script in turn (a string yielded, with {address} filled in; an error
    raised); the last script plays for every try past it."""

    def __init__(self, *scripts: list[str | Exception]) -> None:
        self.tried: list[str] = []
        self._scripts = scripts

    async def __call__(
        self, state: NeuronState, _deadline: RequestDeadline, _metadata: Metadata
    ) -> AsyncIterator[str]:
        script = self._scripts[min(len(self.tried), len(self._scripts) - 1)]
        self.tried.append(state.address)
        for step in script:
            if isinstance(step, Exception):
                raise step
            yield step.format(address=state.address)


async def test_a_failure_before_the_first_item_is_retried_on_another_neuron() -> None:
    attempts, roster = await _attempts("loop-a:1", "loop-b:1")
    attempt = _Scripted([UnavailableError("down")], ["from {address}"])

    got = [x async for x in attempts.run(REQUEST, None, attempt)]
    assert got == [f"from {attempt.tried[1]}"]
    assert len(set(attempt.tried)) == 2
    assert [s.outstanding for s in roster.states] == [0, 0]


async def test_a_failure_after_the_first_item_or_caused_by_the_request_is_not_retried() -> None:
    attempts, roster = await _attempts("late-a:1", "late-b:1")
    late = _Scripted(["part", UnavailableError("down")])
    got: list[str] = []
    with pytest.raises(UnavailableError):
        async for item in attempts.run(REQUEST, None, late):
            got.append(item)
    assert (got, len(late.tried)) == (["part"], 1)

    refused = _Scripted([InvalidRequestError("bad")])
    with pytest.raises(InvalidRequestError):
        [x async for x in attempts.run(REQUEST, None, refused)]
    assert len(refused.tried) == 1
    assert [s.outstanding for s in roster.states] == [0, 0]


async def test_an_oversized_request_is_refused_before_any_neuron() -> None:
    attempts, _roster = await _attempts("size-a:1")
    huge = pb.EmbedRequest(
        request_id="req-2", model="m", inputs=[pb.EmbedInput(text="x" * (MAX_MESSAGE_BYTES + 1))]
    )
    with pytest.raises(RequestTooLargeError):
        await attempts.embed(huge, None)


async def test_each_attempt_is_a_span_whose_context_goes_to_its_neuron(
    spans: InMemorySpanExporter,
) -> None:
    attempts, roster = await _attempts("span-a:1", "span-b:1")
    clients = [state.client for state in roster.states]
    assert all(isinstance(c, FakeNeuron) for c in clients)
    failing, answering = (c for c in clients if isinstance(c, FakeNeuron))
    failing.script = [UnavailableError("down")]
    request = pb.GenerateRequest(request_id="chat-1", model="m")
    with tracing.span("request"):
        # A fresh LeastOutstanding per choice takes the first neuron first.
        got = [r async for r in attempts.generate(request, None)]
    assert got[-1] == DONE
    finished = spans.get_finished_spans()
    [http] = [s for s in finished if s.name == "request"]
    routes = [s for s in finished if s.name == "neuraxis.route"]
    tried = [s for s in finished if s.name == "neuraxis.attempt"]
    assert all(s.parent == http.context for s in [*routes, *tried])
    assert [s.name for s in finished if s.name == "neuraxis.admission"] == ["neuraxis.admission"]
    route_attributes = [dict(s.attributes or {}) for s in routes]
    assert [a["neuraxis.routing.policy"] for a in route_attributes] == ["least_outstanding"] * 2
    assert [a["neuraxis.attempt"] for a in route_attributes] == [0, 1]
    assert [dict(s.attributes or {})["neuraxis.neuron"] for s in tried] == ["span-a:1", "span-b:1"]
    assert [e.name for e in tried[1].events] == ["first_message"]
    assert (tried[0].status.is_ok, tried[1].status.is_ok) == (False, True)
    # Each call carried its own attempt's span as the neuron's parent.
    sent = [*failing.generate_metadata, *answering.generate_metadata]
    assert len(sent) == len(tried)
    parents = {dict(m)["traceparent"].split("-")[2] for m in sent}
    assert parents == {format(s.context.span_id, "016x") for s in tried}


@pytest.mark.parametrize("call", ["embed", "tokenize", "detokenize"])
async def test_a_unary_call_carries_its_attempts_span_and_admission_names_whose_it_is(
    spans: InMemorySpanExporter, call: str
) -> None:
    attempts, roster = await _attempts("unary-a:1")
    [neuron] = [state.client for state in roster.states]
    assert isinstance(neuron, FakeNeuron)
    with tracing.span("request"):
        if call == "embed":
            hints = RouteHints(tenant="team-a")
            await attempts.embed(pb.EmbedRequest(request_id="e-1", model="m"), hints)
        elif call == "tokenize":
            await attempts.tokenize(pb.TokenizeRequest(request_id="t-1", model="m"))
        else:
            await attempts.detokenize(pb.DetokenizeRequest(request_id="d-1", model="m"))
    finished = spans.get_finished_spans()
    [tried] = [s for s in finished if s.name == "neuraxis.attempt"]
    [sent] = neuron.unary_metadata
    assert dict(sent)["traceparent"].split("-")[2] == format(tried.context.span_id, "016x")
    [admission] = [dict(s.attributes or {}) for s in finished if s.name == "neuraxis.admission"]
    assert admission["neuraxis.tenant"] == ("team-a" if call == "embed" else "")
    assert admission["neuraxis.priority"] == "default"
    assert admission["gen_ai.request.model"] == "m"
