"""The life of one dispatched request, from dispatch to its end: its
`Tracker` (what it records and its log line), the stream wrapper that feeds
it (`tracked`: outputs, gaps, usage, outcome, the shutdown cut-off, and the
settlement of a rate-limited key's reservation) and the outcome an error
counts as. Recording goes through the `Recorder` it is given
(cortex/recording.py); the metrics themselves are cortex/metrics.py's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field

from axon.errors import NeuraxisError, mapping_for
from axon.v1 import neuron_pb2 as pb
from cortex.recording import Ended, Observe, Recorder
from cortex.shutdown import CUTOFF

log = logging.getLogger("neuraxis.cortex.requests")

# What hears how a request ended, beside the recorder (the usage ledger,
# cortex/api/accounting.py): the ended request and its cached prompt tokens.
Account = Callable[[Ended, int], None]


def outcome_of(error: BaseException) -> str:
    if isinstance(error, NeuraxisError):
        return "client_error" if mapping_for(error).http_status < 500 else "server_error"
    return "server_error"


@dataclass
class Tracker:
    """Follows one routed request from dispatch to its end: what it records
    and its log line (sizes and timings, never text). A request may fan out
    into several neuron streams (a legacy completion with a list of
    prompts): it ends when all of them have, or when one fails."""

    recorder: Recorder
    api: str
    model: str
    request_id: str
    parts: int = 1
    account: Account | None = None
    started: float = field(default_factory=time.perf_counter)
    _last: float | None = None
    _ttft: float | None = None
    _done: bool = False
    _prompt_tokens: int = 0
    _output_tokens: int = 0
    _cached_tokens: int = 0
    _itl: Observe | None = None

    def __post_init__(self) -> None:
        self.recorder.started(self.api, self.model)
        self._itl = self.recorder.inter_token(self.api, self.model)

    def output(self) -> None:
        now = time.perf_counter()
        if self._last is None:
            self._ttft = now - self.started
            self.recorder.first_output(self.api, self.model, self._ttft)
        elif self._itl is not None:
            self._itl(now - self._last)
        self._last = now

    def part_done(self, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0) -> None:
        self._prompt_tokens += prompt_tokens
        self._output_tokens += output_tokens
        self._cached_tokens += cached_tokens
        self.parts -= 1
        if self.parts <= 0:
            self.finish("success")

    def finish(self, outcome: str) -> None:
        if self._done:
            return
        self._done = True
        duration = time.perf_counter() - self.started
        ended = Ended(
            self.api,
            self.model,
            outcome,
            duration,
            self._prompt_tokens,
            self._output_tokens,
            had_output=self._last is not None,
        )
        self.recorder.finished(ended)
        if self.account is not None:
            self.account(ended, self._cached_tokens)
        log.info(
            "%s %s",
            self.api,
            outcome,
            extra={
                "request_id": self.request_id,
                "api": self.api,
                "model": self.model,
                "outcome": outcome,
                "duration_s": round(duration, 4),
                "ttft_s": round(self._ttft, 4) if self._ttft is not None else None,
                "prompt_tokens": self._prompt_tokens,
                "output_tokens": self._output_tokens,
            },
        )


async def tracked(
    stream: AsyncIterator[pb.GenerateResponse],
    tracker: Tracker,
    on_end: Callable[[int | None, int], None] | None = None,
) -> AsyncGenerator[pb.GenerateResponse, None]:
    """A neuron stream, observed: first output, gaps, tokens, outcome.

    `on_end` (a rate-limited key's reservation) hears the tokens the stream
    used when it ends: its usage, 0 when it failed before reporting any,
    None when it was dropped before its usage arrived (the client left; the
    engine may have spent the prompt's tokens), and the choice deltas it saw
    (each at least a token generated). Here rather than in a wrapper of its
    own: every layer of async generator costs each token of every stream."""
    ended = False
    used: int | None = None
    generated = 0
    try:
        # Read through the cutoff: a server that stops ends it with its error.
        async for response in CUTOFF.guard(stream):
            if response.choices:
                tracker.output()
                generated += len(response.choices)
            if response.HasField("usage"):
                ended = True
                usage = response.usage
                prompt, output = usage.prompt_tokens, usage.completion_tokens
                used = prompt + output
                tracker.part_done(prompt, output, usage.cached_prompt_tokens)
            yield response
    except Exception as e:
        used = 0 if used is None else used  # failed: what it did not use goes back
        tracker.finish(outcome_of(e))
        raise
    finally:
        if not ended:  # dropped before its end: the client went away
            tracker.finish("cancelled")
        if on_end is not None:
            on_end(used, generated)
