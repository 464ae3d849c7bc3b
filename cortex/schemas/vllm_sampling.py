"""vLLM's sampling extensions, accepted on chat and legacy completions as
`vllm serve` accepts them (at the top level of the body, which is where the
openai SDK's `extra_body` puts them), and passed to the engine's
SamplingParams unchanged.

Accepted (vLLM's protocol, entrypoints/openai/{chat_completion,completion}/
protocol.py, "sampling-params"): `top_k` (declared with the shared sampling
fields), `min_p`, `repetition_penalty`, `min_tokens`, `ignore_eos`,
`stop_token_ids`, `include_stop_str_in_output`, `skip_special_tokens`,
`spaces_between_special_tokens`, `allowed_token_ids`, `bad_words`: each one
is a plain SamplingParams field that changes which tokens are sampled or how
they are detokenised, and needs nothing back from the engine that the
stream does not already carry. `use_beam_search: false` and `length_penalty:
1.0` (their defaults, which some clients send) ask for nothing and pass.

Refused with a 400 naming them (VLLM_UNSUPPORTED): beam search
(`use_beam_search: true`, `length_penalty` other than 1: vLLM serves it
outside the streaming engine path), `prompt_logprobs` and
`logprob_token_ids` (need answer fields no OpenAI client reads),
`truncate_prompt_tokens` / `truncation_side` (the neuron truncates whole
turns, `truncation`), `watermarking`. `priority` is not sampling: it is
declared with the request (the request's priority class, admission's).
vLLM's other extra parameters (chat template overrides,
`structured_outputs`, `cache_salt`, KV transfer, `vllm_xargs`, ...) are not
sampling and stay unknown arguments: a 400, as before.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cortex.schemas.common import UINT32_END, RefusesUnsupported, SamplingFields

# vLLM's token ids are int32 in the engine.
TokenId = Annotated[int, Field(ge=0, lt=2**31)]

VLLM_UNSUPPORTED: tuple[str, ...] = (
    "use_beam_search",
    "prompt_logprobs",
    "logprob_token_ids",
    "truncate_prompt_tokens",
    "truncation_side",
    "watermarking",
)


class VllmSamplingFields(BaseModel):
    """The accepted extensions, under vLLM's names (the internal
    SamplingParams uses the same ones)."""

    SCALARS: ClassVar[tuple[str, ...]] = (
        "min_p",
        "repetition_penalty",
        "min_tokens",
        "ignore_eos",
        "include_stop_str_in_output",
        "skip_special_tokens",
        "spaces_between_special_tokens",
    )
    LISTS: ClassVar[tuple[str, ...]] = ("stop_token_ids", "allowed_token_ids", "bad_words")

    min_p: Annotated[float, Field(ge=0, le=1)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0, le=2)] | None = None
    min_tokens: Annotated[int, Field(ge=0, lt=UINT32_END)] | None = None
    ignore_eos: bool | None = None
    stop_token_ids: list[TokenId] | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    allowed_token_ids: Annotated[list[TokenId], Field(min_length=1)] | None = None
    bad_words: list[str] | None = None
    # Beam search's length penalty at its neutral value asks for nothing
    # (`use_beam_search: false` is let through by RefusesUnsupported); the
    # published schema says so (const), as `_no_beam_search` checks.
    length_penalty: Annotated[float, Field(json_schema_extra={"const": 1.0})] | None = None

    @model_validator(mode="after")
    def _no_beam_search(self) -> Self:
        if self.length_penalty is not None and self.length_penalty != 1:
            raise ValueError("'length_penalty' applies to beam search, which is not supported")
        return self


class SamplingRequest(SamplingFields, VllmSamplingFields, RefusesUnsupported):
    """What a chat and a legacy completions request have in common: the
    shared sampling fields, vLLM's extensions, the fields refused by name,
    and no unknown argument (OpenAI rejects them too; a typo should not
    pass unnoticed)."""

    model_config = ConfigDict(extra="forbid")
