"""The API surfaces: each one's path, id and label as clients and dashboards
already know them, and the lookup by path the error handlers count with."""

from __future__ import annotations

from cortex.schemas.surfaces import (
    CHAT,
    COMPLETIONS,
    EMBEDDINGS,
    RESPONSES,
    SURFACES,
    surface_at,
)


def test_the_labels_paths_and_id_prefixes_are_the_published_ones() -> None:
    assert [(s.name, s.path, s.id_prefix) for s in SURFACES] == [
        ("chat", "/v1/chat/completions", "chatcmpl-"),
        ("completions", "/v1/completions", "cmpl-"),
        ("embeddings", "/v1/embeddings", "embd-"),
        ("responses", "/v1/responses", "resp_"),
    ]


def test_request_ids_are_unique_and_prefixed() -> None:
    a, b = RESPONSES.new_request_id(), RESPONSES.new_request_id()
    assert a.startswith("resp_") and len(a) == len("resp_") + 32 and a != b


def test_only_generation_apis_name_their_params_and_only_completions_lists_prompts() -> None:
    assert EMBEDDINGS.params is None
    assert CHAT.params is not None and CHAT.params.tokens == "max_tokens"
    assert RESPONSES.params is not None and RESPONSES.params.messages == "input"
    assert [s.name for s in SURFACES if s.prompt_list] == [COMPLETIONS.name]


def test_a_surface_is_found_by_its_create_path_only() -> None:
    assert surface_at("/v1/chat/completions") is CHAT
    assert surface_at("/v1/responses") is RESPONSES
    assert surface_at("/v1/responses/resp_1") is None
    assert surface_at("/healthz") is None
