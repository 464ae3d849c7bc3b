"""What a request costs in the fair queue (`fair_queue.py`): tokens.

cortex does not tokenize (the neuron owns the tokenizer), so the cost a
request is charged when it gets its slot is an estimate: its prompt at
`BYTES_PER_TOKEN` bytes a token (English text with a BPE tokenizer) and a
few tokens a message, plus the output it is expected to
make: the mean output of the model's recent requests, bounded by the
request's max_tokens (times n). When the request ends, the charge is
corrected to what it really used (`Spent`), and the model's mean learns
from it. An over- or under-estimate therefore only shifts when a tenant's
next request goes, never what it is charged in the end.
"""

from __future__ import annotations

from axon.v1 import neuron_pb2 as pb

# What admission is asked to let through: generation, embeddings, and the
# tokenizer's calls (costed by their size alone: they generate nothing).
Costed = pb.GenerateRequest | pb.EmbedRequest | pb.TokenizeRequest | pb.DetokenizeRequest

BYTES_PER_TOKEN = 4
MESSAGE_TOKENS = 4  # a chat template's markers around each message
# The model's mean output before any request of it has ended, and how fast
# the mean follows new requests (an exponential moving average).
FIRST_OUTPUT_GUESS = 256.0
MEAN_WEIGHT = 0.05


class OutputMeans:
    """The recent mean output tokens per model, per choice."""

    def __init__(self) -> None:
        self._means: dict[str, float] = {}

    def expected(self, model: str) -> float:
        return self._means.get(model, FIRST_OUTPUT_GUESS)

    def learn(self, model: str, output_per_choice: float) -> None:
        mean = self._means.get(model)
        self._means[model] = (
            output_per_choice if mean is None else mean + MEAN_WEIGHT * (output_per_choice - mean)
        )


def choices(request: Costed) -> int:
    if not isinstance(request, pb.GenerateRequest):
        return 1
    return max(1, int(request.sampling.n)) if request.sampling.HasField("n") else 1


def prompt_estimate(request: Costed) -> int:
    """The prompt's text (and tools) at BYTES_PER_TOKEN, plus a few tokens a
    message for its template: not the whole serialized request, whose ids
    and framing would weigh as much as a short prompt's text."""
    if not isinstance(request, pb.GenerateRequest):
        return max(1, int(request.ByteSize()) // BYTES_PER_TOKEN)
    text = len(request.prompt) if request.HasField("prompt") else 0
    text += sum(len(m.content) for m in request.messages)
    text += sum(int(t.ByteSize()) for t in request.tools)
    return max(1, text // BYTES_PER_TOKEN + MESSAGE_TOKENS * len(request.messages))


def estimate(request: Costed, means: OutputMeans) -> float:
    """Tokens `request` is expected to use: prompt + expected output."""
    prompt = prompt_estimate(request)
    if not isinstance(request, pb.GenerateRequest):
        return float(prompt)
    expected = means.expected(request.model)
    if request.sampling.HasField("max_tokens"):
        expected = min(expected, float(request.sampling.max_tokens))
    return prompt + expected * choices(request)


class Spent:
    """The tokens a request's stream was seen to use: the usage its last
    message reports, or (a stream cut before it) the prompt's estimate and
    a token per choice delta received."""

    def __init__(self, request: Costed) -> None:
        self.request = request
        self._prompt = prompt_estimate(request)
        self._output = 0
        self.reported = False  # the neuron said what the request used

    def see(self, message: object) -> None:
        if isinstance(message, pb.GenerateResponse):
            if message.HasField("usage"):
                usage = message.usage
                self._prompt, self._output = usage.prompt_tokens, usage.completion_tokens
                self.reported = True
            else:
                self._output += len(message.choices)
        elif isinstance(message, pb.EmbedResponse):
            self._prompt, self.reported = message.prompt_tokens, True

    @property
    def output(self) -> int:
        return self._output

    @property
    def total(self) -> int:
        return self._prompt + self._output
