"""A large request body's JSON, parsed in a worker thread so that cortex's
event loop keeps its turns (issue 31 point 1).

A worker thread alone is not enough: the json module's C scanner parses a
whole document in one call and holds the GIL for all of it (16 MiB of
short strings: about a second on two loaded cores, every other request and
the health checks waiting meanwhile). It hands the GIL back only when it
calls Python code, so `loads` gives it Python hooks for what it makes most
of: every object (`object_pairs_hook`) and every number (`parse_int`,
`parse_float`); each call is a chance for the loop's thread to take the
GIL (every `sys.getswitchinterval()`, 5 ms). Strings and the literals
(`true`, `false`, `null`) have no hook: a body with more of them than
`HOOKLESS_VALUES` (an array of a million short strings) is parsed by the
json module's pure-Python scanner instead, which yields throughout, ten
times slower; no request that cortex accepts comes near it (2,048
messages of a few strings each, 128 tools).
"""

from __future__ import annotations

import json
import json.scanner
from collections.abc import Callable
from json.decoder import JSONDecoder
from typing import Any

# The json module's pure-Python scanner (untyped: not in typeshed).
_py_make_scanner: Callable[[JSONDecoder], Any] = json.scanner.py_make_scanner  # type: ignore[attr-defined]

# Strings and literals a body may hold for the C scanner (bounded, its
# longest call without a hook is a few milliseconds).
HOOKLESS_VALUES = 65_536


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return dict(pairs)


def _int(text: str) -> int:
    return int(text)


def _float(text: str) -> float:
    return float(text)


def hookless_values(body: bytes) -> int:
    """At least the strings and literals of `body` (an upper bound: text
    inside strings counts too; an escaped quote does not)."""
    quotes = body.count(b'"') - body.count(b'\\"')
    return quotes // 2 + body.count(b"null") + body.count(b"true") + body.count(b"false")


def loads(body: bytes) -> Any:
    """`json.loads(body)`, parsed so that another thread gets the GIL every
    few milliseconds; raises json.JSONDecodeError as json.loads does."""
    # As json.loads reads bytes (UTF-8, -16 or -32); UnicodeDecodeError else.
    text = body.decode(json.detect_encoding(body), "surrogatepass")
    if hookless_values(body) <= HOOKLESS_VALUES:
        return json.loads(text, object_pairs_hook=_object, parse_int=_int, parse_float=_float)
    decoder = JSONDecoder(object_pairs_hook=_object, parse_int=_int, parse_float=_float)
    setattr(decoder, "scan_once", _py_make_scanner(decoder))  # noqa: B010 (untyped)
    return decoder.decode(text)


# Items freed in one call: a list of millions of objects freed at once held
# the GIL for as long as the freeing took (~100 ms).
FREE_SLICE = 4096


def release(value: Any) -> None:
    """Empty the lists and dicts of a parsed document a slice at a time
    (in the worker thread, before it is dropped), so that freeing it never
    holds the GIL for long."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            while item:
                piece = item[-FREE_SLICE:]
                del item[-FREE_SLICE:]
                stack.extend(x for x in piece if isinstance(x, (list, dict)) and len(x) > 64)
        elif isinstance(item, dict):
            stack.extend(v for v in item.values() if isinstance(v, (list, dict)))
