"""The stored form of a finished response's events: compact, and expanded
back exactly.

A streamed answer's events repeat what its final response object holds
(the done events carry the whole text, every lifecycle event the whole
response) and spend ~200 bytes of keys on each few-character delta: stored
as they were sent, the events of a 1,000-token answer took 16× to 27× the
final object. Compacted, they take about 0.6× (bench/store.py):

- a value the final response object holds (an item, a part, a text, the
  response itself, or the response with a few of its own keys as they were
  then) is stored as `{"$ref": path}` (`"with"`: those keys), in its place;
- a run of deltas of one part (consecutive sequence numbers, the same item,
  nothing but the delta different) is stored as the first event (`like`)
  and the lengths of the pieces of the final text they were (`lengths`,
  `of`: where that text is, `at`: where the run began in it), or as the
  pieces themselves (`deltas`) when they are not such a slice.

Every compacted entry is expanded and compared with its event when it is
made; one that would not give the event back is kept whole, so `expand`
returns exactly the events, sequence numbers included, that a replay
(`GET ?stream=true&starting_after=N`) sends. Events that are not a
Responses event pass through untouched. The events of a response still
running are stored whole (they are compacted when it ends); what is not
here: when a store writes (run.py) and the tables (sqlite.py, postgres.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

Json = dict[str, Any]
Path = list[str | int]

REF = "$ref"
# The events that carry a piece of an item's text (or arguments) in `delta`.
DELTAS = frozenset(
    {
        "response.output_text.delta",
        "response.reasoning_text.delta",
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
    }
)


def _resolve(root: Any, path: Path) -> Any:
    for step in path:
        root = root[step]
    return root


def _candidates(event: Json, key: str) -> Iterator[Path]:
    """Where in the final response object the value of `key` may be."""
    index, part = event.get("output_index"), event.get("content_index", 0)
    if key == "response":
        yield []
    if not isinstance(index, int) or not isinstance(part, int):
        return
    item: Path = ["output", index]
    if key == "item":
        yield item
    elif key == "part":
        yield [*item, "content", part]
    elif key in ("text", "logprobs"):
        yield [*item, "content", part, key]
    elif key in ("arguments", "name", "input"):
        yield [*item, key]


def _reference(value: Any, final: Json, path: Path) -> Any:
    """The reference standing for `value`, or None if the final object has
    no equal value there."""
    try:
        there = _resolve(final, path)
    except (LookupError, TypeError):
        return None
    if there == value:
        return {REF: path}
    if path == [] and isinstance(value, dict) and value.keys() == there.keys():
        # A lifecycle event's response as it stood then: the final object
        # with its own keys (status, output, usage, ...) as they were.
        changed = {k: v for k, v in value.items() if there[k] != v}
        return {REF: path, "with": changed}
    return None


def _is_reference(value: Any) -> bool:
    return isinstance(value, dict) and REF in value and value.keys() <= {REF, "with"}


def _referenced(event: Json, final: Json) -> Json:
    out = dict(event)
    for key, value in event.items():
        if key in ("type", "sequence_number"):
            continue
        for path in _candidates(event, key):
            ref = _reference(value, final, path)
            if ref is not None and len(json.dumps(ref)) < len(json.dumps(value)):
                out[key] = ref
                break
    return out


def _dereferenced(entry: Json, final: Json) -> Json:
    out = dict(entry)
    for key, value in entry.items():
        if _is_reference(value):
            resolved = _resolve(final, value[REF])
            out[key] = {**resolved, **value["with"]} if "with" in value else resolved
    return out


def _continues(run: Json, pieces: list[str], event: Json) -> bool:
    """Whether `event` is the next delta of the run that began with `run`."""
    if event.keys() != run.keys() or not isinstance(event.get("delta"), str):
        return False
    if event["sequence_number"] != run["sequence_number"] + len(pieces):
        return False
    return all(v == run[k] for k, v in event.items() if k not in ("delta", "sequence_number"))


def _whole(delta: Json) -> str:
    """Which value of the final item a delta event's pieces add up to."""
    kind = delta["type"]
    if kind == "response.function_call_arguments.delta":
        return "arguments"
    return "input" if kind == "response.custom_tool_call_input.delta" else "text"


def _run_entry(like: Json, pieces: list[str], at: int, final: Json) -> Json:
    """A run of deltas: their lengths when they are a slice (from `at`) of
    the text the final object holds, else the pieces themselves."""
    joined = "".join(pieces)
    for path in _candidates(like, _whole(like)):
        try:
            whole = _resolve(final, path)
        except (LookupError, TypeError):
            continue
        if isinstance(whole, str) and whole[at : at + len(joined)] == joined:
            return {"lengths": [len(p) for p in pieces], "of": path, "at": at, "like": like}
    return {"deltas": pieces, "like": like}


def _run_events(entry: Json, final: Json) -> Iterator[Json]:
    like = entry["like"]
    pieces: list[str] = entry.get("deltas", [])
    if "lengths" in entry:
        whole, at = _resolve(final, entry["of"]), entry["at"]
        for length in entry["lengths"]:
            pieces.append(whole[at : at + length])
            at += length
    first = like["sequence_number"]
    for offset, piece in enumerate(pieces):
        yield {
            k: piece if k == "delta" else first + offset if k == "sequence_number" else v
            for k, v in like.items()
        }


def compact(events: list[Json], final: Json) -> Json | list[Json]:
    """The stored form of a finished response's `events` (`final`: its
    response object as stored): `{"compact": 1, "events": [...]}`, or the
    list as it is when an event is not a Responses event or has a value
    that would read back as a reference."""
    if any(
        "type" not in event or any(_is_reference(v) for v in event.values()) for event in events
    ):
        return events
    out: list[Json] = []
    # How much of each item's text the deltas so far have given, by item
    # and delta type: where the next run's slice of the final text begins.
    given: dict[tuple[str, str], int] = {}
    i = 0
    while i < len(events):
        event = events[i]
        if event["type"] in DELTAS and isinstance(event.get("sequence_number"), int):
            pieces = [event["delta"]]
            while i + len(pieces) < len(events) and _continues(
                event, pieces, events[i + len(pieces)]
            ):
                pieces.append(events[i + len(pieces)]["delta"])
            key = (str(event.get("item_id")), event["type"])
            entry = _run_entry(event, pieces, given.get(key, 0), final)
            given[key] = given.get(key, 0) + sum(map(len, pieces))
            if list(_run_events(entry, final)) != events[i : i + len(pieces)]:
                entry = {"deltas": pieces, "like": event}
            out.append(entry)
            i += len(pieces)
        else:
            entry = _referenced(event, final)
            out.append(entry if _dereferenced(entry, final) == event else event)
            i += 1
    return {"compact": 1, "events": out}


def expand(stored: Json | list[Json], final: Json) -> list[Json]:
    """The events `compact` was given (a list stored whole comes back as it is)."""
    if isinstance(stored, list):
        return stored
    events: list[Json] = []
    for entry in stored["events"]:
        if "like" in entry and "type" not in entry:
            events.extend(_run_events(entry, final))
        else:
            events.append(_dereferenced(entry, final))
    return events
