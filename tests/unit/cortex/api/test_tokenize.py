"""POST /tokenize and /detokenize on a scripted pool: vLLM's shapes in,
the neuron's calls made as the request asks, errors in OpenAI's envelope."""

from __future__ import annotations

from tests.unit.cortex.api.fakes import client


def test_a_prompt_is_tokenized_with_special_tokens_by_default() -> None:
    http, pool = client([])
    answer = http.post("/tokenize", json={"model": "m", "prompt": "abc"})
    assert answer.status_code == 200
    assert answer.json() == {
        "count": 3,
        "max_model_len": 100,
        "tokens": [0, 1, 2],
        "token_strs": None,
    }
    [sent] = pool.tokenized
    assert (sent.model, sent.prompt, sent.add_special_tokens) == ("m", "abc", True)
    assert sent.request_id.startswith("tokenize-")


def test_messages_go_to_the_neuron_with_the_template_options() -> None:
    http, pool = client([])
    body = {
        "model": "m",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "add_generation_prompt": False,
        "continue_final_message": True,
        "return_token_strs": True,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    }
    answer = http.post("/tokenize", json=body)
    assert answer.status_code == 200 and answer.json()["count"] == 2
    assert answer.json()["token_strs"] == []
    [sent] = pool.tokenized
    assert not sent.HasField("prompt")
    assert [(m.role, m.content) for m in sent.messages] == [("system", "be brief"), ("user", "hi")]
    assert [t.name for t in sent.tools] == ["f"]
    assert (sent.add_special_tokens, sent.add_generation_prompt) == (False, False)
    assert sent.continue_final_message and sent.return_token_strs


def test_tokens_are_detokenized() -> None:
    http, pool = client([])
    answer = http.post("/detokenize", json={"model": "m", "tokens": [0, 1, 25]})
    assert (answer.status_code, answer.json()) == (200, {"prompt": "abz"})
    assert list(pool.detokenized[0].tokens) == [0, 1, 25]


def test_malformed_requests_get_openais_error_envelope() -> None:
    http, pool = client([])
    for body in (
        {"model": "m"},
        {"model": "m", "prompt": "a", "messages": [{"role": "user", "content": "b"}]},
        {
            "model": "m",
            "messages": [{"role": "user", "content": "b"}],
            "continue_final_message": True,
        },
    ):
        answer = http.post("/tokenize", json=body)
        assert answer.status_code == 400, body
        assert answer.json()["error"]["type"] == "invalid_request_error"
    negative = http.post("/detokenize", json={"model": "m", "tokens": [-1]})
    assert negative.status_code == 400
    assert pool.tokenized == [] and pool.detokenized == []
