"""In-memory neurons for the pool's tests: each plays NeuronConnection
honestly (typed errors, a stream that can be held open) without grpc."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from axon.errors import DeadlineExceededError, NeuraxisError, UnavailableError
from axon.v1 import neuron_pb2 as pb
from cortex.routing.client import Metadata

# A stream script: messages to send, errors to raise, events to wait for
# (the stream is held open, as a neuron still generating, until one is set).
Step = pb.GenerateResponse | NeuraxisError | asyncio.Event


def text(content: str) -> pb.GenerateResponse:
    return pb.GenerateResponse(choices=[pb.ChoiceDelta(index=0, text=content)])


DONE = pb.GenerateResponse(
    choices=[pb.ChoiceDelta(index=0, text="!", finish_reason=pb.FINISH_REASON_STOP)],
    usage=pb.Usage(prompt_tokens=3, completion_tokens=2),
)


class FakeNeuron:
    """A neuron serving `models`; its answers are set by the test."""

    def __init__(
        self,
        address: str,
        models: Sequence[str] = ("m",),
        *,
        ready: bool = True,
        task: pb.ModelTask = pb.MODEL_TASK_GENERATE,
    ) -> None:
        self.address = address
        self.models = [pb.ModelInfo(id=m, max_context_length=100, task=task) for m in models]
        self.ready = ready
        self.reachable = True
        self.info_times_out = False  # Info past its deadline (a slow poll, or a hung neuron)
        self.script: list[Step] = [text("hi"), DONE]
        self.embed_error: NeuraxisError | None = None
        self.generate_requests: list[pb.GenerateRequest] = []
        self.generate_metadata: list[Metadata] = []  # each call's (the trace context)
        self.unary_metadata: list[Metadata] = []  # each Embed/Tokenize/Detokenize call's
        self.embed_requests: list[pb.EmbedRequest] = []
        self.streams_open = 0
        self.waiting = 0  # what its engine reports as queued (other senders' work)
        self.kv_cache_usage: float | None = None  # None: not reported (as the sim engine)
        self.max_concurrency = 0  # the engine's batch size as Info reports it (0: unknown)
        self.adapters: list[str] = []  # the LoRA adapters its engine holds (Info and Load)
        self.max_adapters = 0
        self.adapter_error: NeuraxisError | None = None  # LoadAdapter refuses with it
        self.closed = False

    async def info(self, timeout: float) -> pb.InfoResponse:
        if not self.reachable:
            raise UnavailableError(f"neuron {self.address} is unreachable")
        if self.info_times_out:
            raise DeadlineExceededError(f"neuron {self.address}: Info past its deadline")
        return pb.InfoResponse(
            models=self.models,
            engine="fake",
            ready=self.ready,
            max_concurrency=self.max_concurrency,
            adapters=self.adapters,
            max_adapters=self.max_adapters,
        )

    async def embed(
        self, request: pb.EmbedRequest, timeout: float, metadata: Metadata = ()
    ) -> pb.EmbedResponse:
        self.embed_requests.append(request)
        self.unary_metadata.append(metadata)
        if self.embed_error is not None:
            raise self.embed_error
        return pb.EmbedResponse(embeddings=[pb.Embedding(values=[1.0])], prompt_tokens=1)

    async def load(self, timeout: float) -> pb.LoadResponse:
        if not self.reachable:
            raise UnavailableError(f"neuron {self.address} is unreachable")
        return pb.LoadResponse(
            running=self.streams_open,
            waiting=self.waiting,
            kv_cache_usage=self.kv_cache_usage,
            adapters=self.adapters,
        )

    async def tokenize(
        self, request: pb.TokenizeRequest, timeout: float, metadata: Metadata = ()
    ) -> pb.TokenizeResponse:
        self.unary_metadata.append(metadata)
        if not self.reachable:
            raise UnavailableError(f"neuron {self.address} is unreachable")
        return pb.TokenizeResponse(tokens=[1, 2], max_model_len=100)

    async def detokenize(
        self, request: pb.DetokenizeRequest, timeout: float, metadata: Metadata = ()
    ) -> pb.DetokenizeResponse:
        self.unary_metadata.append(metadata)
        return pb.DetokenizeResponse(prompt=f"from {self.address}")

    async def serving(self, timeout: float) -> bool:
        return self.reachable and self.ready

    async def load_adapter(self, adapter_id: str, source: str, timeout: float) -> None:
        """Serves the adapter from now on (on its first model), unless told
        to refuse it (`adapter_error`), as a neuron refuses a bad source."""
        if self.adapter_error is not None:
            raise self.adapter_error
        parent = self.models[0].id
        self.models.append(pb.ModelInfo(id=adapter_id, parent=parent, max_context_length=100))
        self.adapters.append(adapter_id)

    async def unload_adapter(self, adapter_id: str, timeout: float) -> None:
        self.models = [m for m in self.models if m.id != adapter_id]
        self.adapters = [a for a in self.adapters if a != adapter_id]

    async def generate(
        self, request: pb.GenerateRequest, timeout: float, metadata: Metadata = ()
    ) -> AsyncIterator[pb.GenerateResponse]:
        self.generate_requests.append(request)
        self.generate_metadata.append(metadata)
        self.streams_open += 1
        try:
            for step in self.script:
                if isinstance(step, asyncio.Event):
                    await step.wait()
                elif isinstance(step, NeuraxisError):
                    raise step
                else:
                    yield step
        finally:
            self.streams_open -= 1

    async def close(self) -> None:
        self.closed = True


class Fleet:
    """The pool's client factory: hands out the FakeNeuron for an address,
    made on first use, and remembers every one it made."""

    def __init__(self) -> None:
        self.neurons: dict[str, FakeNeuron] = {}

    def __call__(self, address: str) -> FakeNeuron:
        return self.neurons.setdefault(address, FakeNeuron(address))
