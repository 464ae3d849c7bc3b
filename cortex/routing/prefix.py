"""Prompt-prefix hashes for cache-aware routing, computed without a tokenizer.

cortex never tokenizes (the neuron owns the chat template), so the prefix is
hashed from the internal request itself: its system and developer turns,
then its tools, then the other turns in order (or, for a raw prompt, the
prompt), serialized and cut into fixed-size blocks of bytes. Hashes are
chained, so block k's hash covers blocks 0..k: two requests share block k's
hash only when they share everything up to the end of block k, which is
what an engine's prefix cache can reuse. The order puts what stays the same
across a conversation first, so a later turn of the same chat keeps every
earlier block's hash.

BLAKE2b rather than Python's `hash()`: the values must agree across cortex
processes and restarts (string hashing is salted per process). Only the
first `max_blocks` blocks are hashed, which bounds the work per request.

What does not live here: the decision (`prefix_affinity.py`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from axon.v1 import neuron_pb2 as pb

# Roles whose turns lead the serialized prefix: chat templates put them (and
# the tools) before the conversation.
_LEADING_ROLES = frozenset({"system", "developer"})


@dataclass(frozen=True)
class PrefixHasher:
    """Cuts a request's prefix into `block_bytes`-sized blocks and hashes the
    first `max_blocks` of them, chained."""

    block_bytes: int = 256
    max_blocks: int = 32

    def __post_init__(self) -> None:
        if self.block_bytes <= 0 or self.max_blocks <= 0:
            raise ValueError("block_bytes and max_blocks must be positive")

    def blocks(self, request: pb.GenerateRequest, salt: str | None = None) -> tuple[int, ...]:
        """The chained hashes of the request's full blocks (a partial last
        block is left out: it changes with every request that extends it).
        `salt` (a client's prompt_cache_key) starts the chain, so requests
        with different keys never share a hash."""
        data = serialize(request)
        size = self.block_bytes
        count = min(len(data) // size, self.max_blocks)
        previous = hashlib.blake2b(salt.encode(), digest_size=8).digest() if salt else b""
        out = []
        for k in range(count):
            digest = hashlib.blake2b(
                previous + data[k * size : (k + 1) * size], digest_size=8
            ).digest()
            out.append(int.from_bytes(digest, "big"))
            previous = digest
        if not out and data:
            # A prompt shorter than one block still deserves a stable key.
            digest = hashlib.blake2b(previous + data, digest_size=8).digest()
            out.append(int.from_bytes(digest, "big"))
        return tuple(out)


def serialize(request: pb.GenerateRequest) -> bytes:
    """The request's prefix-relevant content as bytes, most stable part first."""
    if request.HasField("prompt"):
        return b"P\x1e" + request.prompt.encode()
    leading = [m for m in request.messages if m.role in _LEADING_ROLES]
    rest = [m for m in request.messages if m.role not in _LEADING_ROLES]
    parts = [_field(b"M", m) for m in leading]
    parts += [_field(b"T", t) for t in request.tools]
    parts += [_field(b"M", m) for m in rest]
    return b"".join(parts)


def _field(tag: bytes, message: pb.ChatMessage | pb.Tool) -> bytes:
    # Deterministic serialization: the same message gives the same bytes in
    # every process.
    return tag + b"\x1f" + bytes(message.SerializeToString(deterministic=True)) + b"\x1e"
