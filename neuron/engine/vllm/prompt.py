"""Turning an EngineRequest into what vLLM takes: prompt token ids (the chat
template rendered with the model's own tokenizer) and SamplingParams with
any structured-output constraint (forced tool calls, JSON formats) and
vLLM's sampling extensions.

Tools reach the template as OpenAI function tools, whatever their kind: a
custom tool (free-form input) is offered as a function of one string
argument, `input` (CUSTOM_INPUT_SCHEMA), because chat templates and vLLM's
tool parsers know functions only; cortex turns `{"input": ...}` back into the
custom call's text. A custom tool forced by name is different: its output
*is* the input, constrained by the tool's grammar (lark or regex) through
vLLM's structured outputs, or free text without one."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from axon.errors import InvalidRequestError
from neuron.engine.base import (
    EngineRequest,
    GrammarSyntax,
    Message,
    ResponseFormatKind,
    TokenizeRequest,
    Tool,
    ToolChoiceMode,
    ToolKind,
)

# The arguments of a custom tool as the model sees it (see the docstring).
CUSTOM_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string"}},
    "required": ["input"],
}

# Roles never dropped by truncation: the instructions.
_KEPT_ROLES = ("system", "developer")


def render_fitting(tokenizer: Any, request: EngineRequest, limit: int) -> list[int]:
    """Render; with truncate_oldest, drop the oldest non-system turns until the
    prompt leaves room for the requested output (or one turn is left).

    Linear in the number of messages: each message is tokenised once for an
    estimate of its cost, the oldest turns whose costs cover the excess go at
    once, and the conversation is rendered again only to check (once or twice:
    the estimate is close). Re-rendering after each dropped turn was quadratic:
    seconds of CPU for a few thousand messages."""
    ids = render(tokenizer, request)
    room = limit - (request.sampling.max_tokens or 1)
    if not request.truncate_oldest or len(ids) <= room:
        return ids
    messages = request.messages
    costs = _estimated_costs(tokenizer, messages, len(ids))
    droppable = [i for i, m in enumerate(messages) if m.role not in _KEPT_ROLES]
    kept = [True] * len(messages)
    dropped = 0  # how many of `droppable` are gone, oldest first
    while len(ids) > room and len(droppable) - dropped > 1:
        freed, excess = 0.0, len(ids) - room
        while freed < excess and len(droppable) - dropped > 1:
            i = droppable[dropped]
            kept[i], freed, dropped = False, freed + costs[i], dropped + 1
            # A tool result without the call it answers confuses templates: drop it too.
            while i + 1 < len(messages) and messages[i + 1].role == "tool":
                i += 1
                kept[i], freed, dropped = False, freed + costs[i], dropped + 1
        remaining = tuple(m for m, k in zip(messages, kept, strict=True) if k)
        ids = render(tokenizer, replace(request, messages=remaining))
    return ids


def _estimated_costs(tokenizer: Any, messages: tuple[Message, ...], total: int) -> list[float]:
    """Each message's share of the rendered prompt: its own tokens plus an even
    share of what the template adds (role markers, default system prompt)."""
    own = [
        len(tokenizer.encode(_template_message(m)["content"], add_special_tokens=False))
        for m in messages
    ]
    overhead = max(0.0, (total - sum(own)) / len(messages))
    return [n + overhead for n in own]


def render(tokenizer: Any, request: EngineRequest) -> list[int]:
    if request.prompt is not None:
        ids = tokenizer.encode(request.prompt)
    else:
        tools = None
        if request.tools and request.tool_choice.mode is not ToolChoiceMode.NONE:
            tools = [openai_tool(t) for t in request.tools]
        # A template that refuses the conversation raises Jinja's errors:
        # errors.py says which are the request's fault.
        text = tokenizer.apply_chat_template(
            [_template_message(m) for m in request.messages],
            tools=tools,
            add_generation_prompt=True,
            tokenize=False,
        )
        ids = tokenizer.encode(text, add_special_tokens=False)
    return list(ids)


def tokenize(tokenizer: Any, request: TokenizeRequest) -> list[int]:
    """/tokenize as vLLM's server does it: the prompt encoded, or the
    messages rendered (the options as given) and the text encoded."""
    if request.prompt is not None:
        return list(tokenizer.encode(request.prompt, add_special_tokens=request.add_special_tokens))
    text = tokenizer.apply_chat_template(
        [_template_message(m) for m in request.messages],
        tools=[openai_tool(t) for t in request.tools] or None,
        add_generation_prompt=request.add_generation_prompt,
        continue_final_message=request.continue_final_message,
        tokenize=False,
    )
    return list(tokenizer.encode(text, add_special_tokens=request.add_special_tokens))


def offered_parameters(tool: Tool) -> dict[str, Any] | None:
    """The JSON schema of the arguments the model is offered for `tool`."""
    if tool.kind is ToolKind.CUSTOM:
        return CUSTOM_INPUT_SCHEMA
    return tool.parameters


def openai_tool(tool: Tool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name, "description": tool.description}
    parameters = offered_parameters(tool)
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


def _template_message(message: Message) -> dict[str, Any]:
    # OpenAI's "developer" role is the newer name for "system"; templates
    # written before it know only "system".
    role = "system" if message.role == "developer" else message.role
    out: dict[str, Any] = {"role": role, "content": message.content}
    if message.name:
        out["name"] = message.name
    if message.tool_calls:
        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
        out["tool_calls"] = calls
        if not message.content:
            # Templates without tool support print only the content: keep the
            # calls visible to the model in the Hermes convention.
            out["content"] = "".join(
                "<tool_call>"
                + json.dumps({"name": c.name, "arguments": _loads_or_text(c.arguments)})
                + "</tool_call>"
                for c in message.tool_calls
            )
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    return out


def _loads_or_text(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def required_calls_schema(tools: tuple[Tool, ...], parallel: bool = True) -> dict[str, Any]:
    """A JSON array of one or more {name, parameters} objects, each naming one
    of the tools with arguments valid for its schema."""
    variants = [
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": [t.name]},
                "parameters": offered_parameters(t) or {"type": "object"},
            },
            "required": ["name", "parameters"],
        }
        for t in tools
    ]
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": variants}}
    if not parallel:
        schema["maxItems"] = 1
    return schema


def structured_outputs(request: EngineRequest) -> Any:
    from vllm.sampling_params import StructuredOutputsParams

    mode = request.tool_choice.mode
    if request.tools and mode is ToolChoiceMode.NAMED:
        tool = next((t for t in request.tools if t.name == request.tool_choice.name), None)
        if tool is None:
            raise InvalidRequestError(
                f"tool_choice names '{request.tool_choice.name}', which is not in tools",
                param="tool_choice",
            )
        if tool.kind is ToolKind.CUSTOM:
            return _custom_input(tool)
        return StructuredOutputsParams(json=tool.parameters or {"type": "object"})
    if request.tools and mode is ToolChoiceMode.REQUIRED:
        return StructuredOutputsParams(
            json=required_calls_schema(request.tools, request.parallel_tool_calls)
        )
    fmt = request.response_format
    if fmt.kind is ResponseFormatKind.JSON_SCHEMA:
        return StructuredOutputsParams(json=fmt.schema or {"type": "object"})
    if fmt.kind is ResponseFormatKind.JSON_OBJECT:
        return StructuredOutputsParams(json_object=True)
    return None


def _custom_input(tool: Tool) -> Any:
    """A forced custom tool's output is its input: its grammar, or free text."""
    from vllm.sampling_params import StructuredOutputsParams

    if tool.grammar is None:
        return None
    if tool.grammar.syntax is GrammarSyntax.REGEX:
        return StructuredOutputsParams(regex=tool.grammar.definition)
    # xgrammar, vLLM's default backend, compiles lark grammars.
    return StructuredOutputsParams(grammar=tool.grammar.definition)


def sampling_params(request: EngineRequest, max_tokens: int) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    s = request.sampling
    given: dict[str, Any] = {
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k,
        "seed": s.seed,
        "presence_penalty": s.presence_penalty,
        "frequency_penalty": s.frequency_penalty,
        "logprobs": s.logprobs,
        "structured_outputs": structured_outputs(request),
        "min_p": s.min_p,
        "repetition_penalty": s.repetition_penalty,
        "min_tokens": s.min_tokens,
        "ignore_eos": s.ignore_eos,
        "stop_token_ids": list(s.stop_token_ids) or None,
        "include_stop_str_in_output": s.include_stop_str_in_output,
        "skip_special_tokens": s.skip_special_tokens,
        "spaces_between_special_tokens": s.spaces_between_special_tokens,
        "allowed_token_ids": list(s.allowed_token_ids) or None,
        "bad_words": list(s.bad_words) or None,
    }
    kwargs = {k: v for k, v in given.items() if v is not None}
    return SamplingParams(
        n=s.n,
        max_tokens=max_tokens,
        stop=list(s.stop) or None,
        output_kind=RequestOutputKind.DELTA,
        **kwargs,
    )
