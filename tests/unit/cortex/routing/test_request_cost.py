"""What a request costs the fair queue: its prompt estimate plus expected
output for generation; its size alone for the calls that generate nothing
(embeddings, and the tokenizer's calls, which go through admission too)."""

from __future__ import annotations

from axon.v1 import neuron_pb2 as pb
from cortex.routing.admission import AdmissionControl, AdmissionOptions
from cortex.routing.request_cost import (
    BYTES_PER_TOKEN,
    MESSAGE_TOKENS,
    OutputMeans,
    Spent,
    estimate,
)


def test_generation_costs_its_prompt_and_its_expected_output() -> None:
    request = pb.GenerateRequest(
        model="m",
        messages=[pb.ChatMessage(role="user", content="x" * 40)],
        sampling=pb.SamplingParams(max_tokens=5),
    )
    prompt = 40 // BYTES_PER_TOKEN + MESSAGE_TOKENS
    assert estimate(request, OutputMeans()) == prompt + 5  # max_tokens bounds the guess


def test_the_tokenizers_calls_cost_their_size_and_are_claimed() -> None:
    calls: list[pb.TokenizeRequest | pb.DetokenizeRequest] = [
        pb.TokenizeRequest(model="m", prompt="y" * 80),
        pb.DetokenizeRequest(model="m", tokens=list(range(30))),
    ]
    admission = AdmissionControl(AdmissionOptions(), lambda model: None, lambda: 0.0)
    for request in calls:
        cost = estimate(request, OutputMeans())
        assert cost == max(1, request.ByteSize() // BYTES_PER_TOKEN)
        claim = admission.claim(request, "acme")
        assert claim.cost == cost and claim.cls == "default"
        assert Spent(request).total == cost
