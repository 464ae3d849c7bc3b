"""The tool catalogue: what the model is offered for the tool types of the
Responses API and chat (namespaces flattened, custom tools, hosted tools
left out and counted, a forced hosted tool refused) and the way back from a
call's name to the client's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client import REGISTRY

from axon.errors import InvalidRequestError
from axon.v1 import neuron_pb2 as pb
from cortex.api import tools
from cortex.recording import PrometheusRecorder
from cortex.schemas.chat import ChatCompletionRequest
from cortex.schemas.responses import ResponsesRequest

CRM = {
    "type": "namespace",
    "name": "crm",
    "description": "The CRM.",
    "tools": [
        {"type": "function", "name": "lookup", "description": "Find a customer.",
         "parameters": {"type": "object"}},
        {"type": "custom", "name": "note"},
    ],
}  # fmt: skip
PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch"'},
}


def _catalog(tool_list: list[Any], choice: Any = None) -> tools.Catalog:
    body = ResponsesRequest.model_validate(
        {"model": "m", "input": "Hi", "tools": tool_list, "tool_choice": choice}
    )
    return tools.responses_catalog(body.tools or [], body.tool_choice, PrometheusRecorder())


def _dropped(kind: str) -> float:
    value = REGISTRY.get_sample_value(
        "neuraxis_dropped_tools_total", {"api": "responses", "type": kind}
    )
    return value or 0.0


def test_a_namespace_is_flattened_and_named_back() -> None:
    catalog = _catalog([CRM])
    assert [t.name for t in catalog.tools] == ["crm.lookup", "crm.note"]
    lookup, note = catalog.tools
    assert lookup.kind == pb.TOOL_KIND_UNSPECIFIED and json.loads(lookup.parameters_json)
    assert lookup.description == "The CRM.\nFind a customer."
    assert note.kind == pb.TOOL_KIND_CUSTOM
    assert catalog.naming.of("crm.lookup") == tools.Offered("lookup", "crm")
    assert catalog.naming.of("crm.note") == tools.Offered("note", "crm", custom=True)


def test_a_name_the_request_did_not_offer_stays_a_function() -> None:
    assert _catalog([CRM]).naming.of("invented") == tools.Offered("invented")


def test_a_custom_tool_carries_its_grammar() -> None:
    (tool,) = _catalog([PATCH]).tools
    assert tool.kind == pb.TOOL_KIND_CUSTOM and tool.name == "apply_patch"
    assert tool.grammar_syntax == pb.GRAMMAR_SYNTAX_LARK
    assert tool.grammar == 'start: "*** Begin Patch"'
    (free,) = _catalog([{"type": "custom", "name": "t", "format": {"type": "text"}}]).tools
    assert free.kind == pb.TOOL_KIND_CUSTOM and not free.grammar


def test_hosted_tools_are_left_out_and_counted() -> None:
    before = _dropped("web_search"), _dropped("mcp")
    catalog = _catalog(
        [
            {"type": "function", "name": "f"},
            {"type": "web_search", "external_web_access": False},
            {"type": "mcp", "server_label": "docs", "server_url": "https://example.invalid"},
        ]
    )
    assert [t.name for t in catalog.tools] == ["f"]
    assert catalog.dropped == ["web_search", "mcp"]
    assert (_dropped("web_search"), _dropped("mcp")) == (before[0] + 1, before[1] + 1)


@pytest.mark.parametrize(
    ("choice", "named"),
    [
        ({"type": "web_search_preview"}, "'web_search_preview'"),
        ({"type": "mcp", "server_label": "docs", "name": "search"}, "'docs/search'"),
        ({"type": "shell"}, "'shell'"),
    ],
)
def test_a_forced_hosted_tool_is_a_400_naming_it(choice: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidRequestError) as e:
        _catalog([{"type": "web_search"}, {"type": "function", "name": "f"}], choice)
    assert named in e.value.message and e.value.param == "tool_choice"


def test_only_hosted_tools_ask_for_no_tools_unless_required() -> None:
    catalog = _catalog([{"type": "web_search"}])
    assert tools.effective_mode(catalog, "auto") == (None, False)
    with pytest.raises(InvalidRequestError) as e:
        tools.effective_mode(catalog, "required")
    assert "web_search" in e.value.message
    assert tools.effective_mode(_catalog([{"type": "function", "name": "f"}]), "auto") == (
        "auto",
        True,
    )


def test_tool_choice_resolves_a_namespaced_name_and_checks_the_kind() -> None:
    catalog = _catalog([CRM])
    assert catalog.resolve("lookup", custom=False) == "crm.lookup"
    assert catalog.resolve("crm.note", custom=True) == "crm.note"
    with pytest.raises(InvalidRequestError) as e:
        catalog.resolve("lookup", custom=True)
    assert "is a function" in e.value.message


def test_a_forced_custom_tool_is_recorded_for_its_raw_input() -> None:
    catalog = _catalog([PATCH], {"type": "custom", "name": "apply_patch"})
    assert catalog.naming.forced_custom == "apply_patch"
    assert catalog.naming.custom_input("apply_patch", '{"input": "raw"}') == '{"input": "raw"}'


def test_a_custom_call_offered_as_a_function_is_unwrapped() -> None:
    naming = _catalog([PATCH]).naming
    assert naming.custom_input("apply_patch", json.dumps({"input": "*** Begin"})) == "*** Begin"
    assert naming.custom_input("apply_patch", "not json") == "not json"


def test_two_tools_of_one_name_are_refused() -> None:
    with pytest.raises(InvalidRequestError):
        _catalog([{"type": "function", "name": "f"}, {"type": "custom", "name": "f"}])


def test_naming_is_rebuilt_from_a_stored_echo() -> None:
    naming = tools.CallNaming.from_echo(
        {"tools": [CRM, PATCH], "tool_choice": {"type": "custom", "name": "apply_patch"}}
    )
    assert naming.of("crm.note").custom and naming.forced_custom == "apply_patch"
    assert tools.CallNaming.from_echo({"tools": [{"type": "nonsense"}]}).offered == {}


def test_chat_function_and_custom_tools() -> None:
    body = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Hi"}],
            "tools": [
                {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
                {
                    "type": "custom",
                    "custom": {
                        "name": "digits",
                        "format": {
                            "type": "grammar",
                            "grammar": {"syntax": "regex", "definition": "[0-9]+"},
                        },
                    },
                },
            ],
        }
    )
    catalog = tools.chat_catalog(body.tools or [])
    f, digits = catalog.tools
    assert f.kind == pb.TOOL_KIND_UNSPECIFIED and f.name == "f"
    assert digits.kind == pb.TOOL_KIND_CUSTOM and digits.grammar == "[0-9]+"
    assert digits.grammar_syntax == pb.GRAMMAR_SYNTAX_REGEX
    assert catalog.naming.of("digits").custom
