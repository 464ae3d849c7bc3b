"""The size limit of one gRPC message between cortex and a neuron, shared by
both ends so that they agree.

gRPC's default (4 MiB received) is below cortex's own body limit (16 MiB by
default), so a large but legal request used to be refused by the neuron's
transport with RESOURCE_EXHAUSTED. Both ends now take messages up to
`MAX_MESSAGE_BYTES`: cortex's body limit plus room for what a stored
`previous_response_id` chain adds; cortex refuses, with a 413 naming the
cause, an internal request that would still be larger (`check_size`)."""

from __future__ import annotations

from axon.errors import RequestTooLargeError

MAX_MESSAGE_BYTES = 64 * 1024 * 1024

# The channel and server options that set it, in both directions.
MESSAGE_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]


def check_size(size: int) -> None:
    """Refuse an internal request of `size` encoded bytes past the limit."""
    if size > MAX_MESSAGE_BYTES:
        raise RequestTooLargeError(
            f"The request, with the earlier turns of its previous_response_id chain, is "
            f"{size} bytes once encoded, over the limit of {MAX_MESSAGE_BYTES} bytes."
        )
