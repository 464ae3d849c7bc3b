"""Non-streamed answers: encoded in pieces to exactly what pydantic writes,
and built off the event loop when large (issue 31 point 2)."""

from __future__ import annotations

import asyncio
import json
import threading

from axon.v1 import neuron_pb2 as pb
from cortex.api.answers import IN_THREAD_ENTRIES, SLICE, deferred, encode, entries, json_answer
from cortex.api.choices import PackedLogprobs, logprobs_out
from cortex.schemas.chat import AssistantMessage, ChatCompletion, Choice
from cortex.schemas.common import ChoiceLogprobs, CompletionUsage, PromptTokensDetails
from cortex.schemas.completions import Completion, CompletionChoice, CompletionLogprobs

USAGE = CompletionUsage(
    prompt_tokens=3,
    completion_tokens=7,
    total_tokens=10,
    prompt_tokens_details=PromptTokensDetails(cached_tokens=0),
)


def _entries(count: int) -> list[pb.TokenLogprob]:
    top = [pb.TopLogprob(token=f'"t{i}', logprob=-0.5 * i, bytes=b"t") for i in range(5)]
    out = [pb.TokenLogprob(token="é\n", logprob=-1.25, bytes=b"\xc3\xa9", top=top)] * count
    out[3] = pb.TokenLogprob(token="x", logprob=float("-inf"), bytes=b"x")
    return out


def _chat(choices: int, tokens: int) -> ChatCompletion:
    logprobs = ChoiceLogprobs(content=logprobs_out(_entries(tokens)))
    return ChatCompletion(
        id="chatcmpl-1",
        created=1,
        model='m "choices":[]',
        choices=[
            Choice(
                index=i,
                message=AssistantMessage(content="a\u2028b", reasoning_content=None),
                logprobs=logprobs,
                finish_reason="length",
            )
            for i in range(choices)
        ],
        usage=USAGE,
    )


def test_a_large_chat_answer_is_encoded_as_pydantic_encodes_it() -> None:
    answer = _chat(choices=3, tokens=3 * SLICE + 5)
    assert encode(answer) == answer.model_dump_json().encode()
    assert json.loads(encode(answer))["choices"][2]["logprobs"]["content"][3]["logprob"] is None


def test_deferred_logprobs_are_encoded_as_the_whole_list_would_be() -> None:
    source = _entries(2 * SLICE + 7)
    lazy = ChoiceLogprobs.model_construct(content=deferred(source, logprobs_out), refusal=None)
    whole = ChoiceLogprobs(content=logprobs_out(source))
    assert encode(lazy) == whole.model_dump_json().encode()


def test_a_large_completions_answer_is_encoded_as_pydantic_encodes_it() -> None:
    count = 2 * SLICE + 1
    logprobs = CompletionLogprobs(
        tokens=["a"] * count,
        token_logprobs=[-0.5] * count,
        top_logprobs=[{"a": -0.5, "b": -2.0}] * count,
        text_offset=list(range(count)),
    )
    choice = CompletionChoice(index=0, text="aa", logprobs=logprobs, finish_reason="stop")
    answer = Completion(id="cmpl-1", created=1, model="m", choices=[choice, choice], usage=USAGE)
    assert encode(answer) == answer.model_dump_json().encode()


def test_small_answers_are_built_on_the_loop_and_large_ones_in_a_thread() -> None:
    built_on: list[threading.Thread] = []

    def build() -> ChatCompletion:
        built_on.append(threading.current_thread())
        return _chat(choices=1, tokens=4)

    async def answer(size: int) -> bytes:
        return bytes((await json_answer(build, size, {"X-Request-Id": "r"})).body)

    small = asyncio.run(answer(IN_THREAD_ENTRIES))
    large = asyncio.run(answer(IN_THREAD_ENTRIES + 1))
    assert small == large == build().model_dump_json().encode()
    assert built_on[0] is threading.main_thread()
    assert built_on[1] is not threading.main_thread()


def test_entries_count_the_tokens_and_their_alternatives() -> None:
    assert entries(4096, 20) == 4096 * 21
    assert entries(10, None) == entries(10, 0) == 10


def test_a_mapping_is_encoded_as_json_in_pieces() -> None:
    """A Response's snapshot (a dict) with a long list of logprobs."""
    entry = {"token": "é\n", "logprob": -1.25, "bytes": [195, 169], "top_logprobs": []}
    snapshot = {"id": "resp_1", "output": [{"logprobs": [entry] * (2 * SLICE + 3)}], "n": None}
    expected = json.dumps(snapshot, ensure_ascii=False, separators=(",", ":")).encode()
    assert encode(snapshot) == expected


def test_packed_logprobs_give_back_each_entry_and_slice() -> None:
    packed = PackedLogprobs()
    entries = [
        pb.TokenLogprob(
            token=f"t{i}", logprob=-i / 10, bytes=b"t", top=[pb.TopLogprob(token="a", logprob=-1)]
        )
        for i in range(5)
    ]
    packed.extend(entries[:3])
    packed.extend(entries[3:])
    assert len(packed) == 5
    assert packed[4] == entries[4]
    assert packed[1:3] == entries[1:3]
    assert list(packed) == entries
