"""Large bodies parsed so that the event loop keeps its turns
(cortex/api/body_json.py): the same values as json.loads on both paths, the
count that picks the path, and freeing a slice at a time."""

from __future__ import annotations

import json
import threading
import time

import pytest

from cortex.api import body_json

DOCUMENTS = [
    {"model": "m", "messages": [{"role": "user", "content": 'say "hi", twice'}] * 50},
    {"input": [1, 2, 3, -4], "x": 1.5e-3, "flags": [True, False, None], "nested": {"a": [[]]}},
    {"text": "é ✓ \\u00e9 \\n", "empty": {}, "big": 12345678901234567890},
]


@pytest.mark.parametrize("document", DOCUMENTS)
@pytest.mark.parametrize("hookless", [body_json.HOOKLESS_VALUES, 0])
def test_both_paths_give_what_json_loads_gives(
    document: object, hookless: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(body_json, "HOOKLESS_VALUES", hookless)  # 0: the pure-Python path
    body = json.dumps(document).encode()
    assert body_json.loads(body) == json.loads(body)


def test_invalid_json_raises_as_json_loads_does() -> None:
    with pytest.raises(json.JSONDecodeError):
        body_json.loads(b'{"model": "m",')
    with pytest.raises(UnicodeDecodeError):
        body_json.loads(b'{"model": "\xff\xfe\xfa"}')


def test_hookless_values_count_strings_and_literals_not_escaped_quotes() -> None:
    body = json.dumps({"a": 'x "y" z', "b": [None, True, False, 1, 2.5]}).encode()
    # "a", the string, "b": 3 strings; null, true, false: 3 literals.
    assert body_json.hookless_values(body) == 6


def test_an_array_of_a_million_strings_leaves_the_other_thread_its_turns() -> None:
    # The C scanner makes such an array in one call that holds the GIL; the
    # pure-Python scanner, which this body gets, hands it over throughout.
    body = json.dumps(["ab"] * 1_000_000).encode()
    assert body_json.hookless_values(body) > body_json.HOOKLESS_VALUES
    ticks: list[float] = []
    parsing = threading.Thread(target=body_json.loads, args=(body,))
    parsing.start()
    while parsing.is_alive():
        ticks.append(time.monotonic())
        time.sleep(0.001)
    parsing.join()
    # json.loads would give one or two ticks: the parse in between.
    assert len(ticks) > 20


def test_release_empties_the_big_lists_of_a_document() -> None:
    inner = list(range(10_000))
    document = {"messages": [{"role": "user"}] * 9000, "input": [inner, [1, 2]]}
    body_json.release(document)
    assert document["messages"] == [] and document["input"] == [] and inner == []
