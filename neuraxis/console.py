"""What `neuraxis up` prints: its own lines (prefixed `neuraxis:`; warnings
and errors on stderr), how auth is set, and the banner once cortex is ready.
The replicas' progress lines are progress.py's."""

from __future__ import annotations

import sys

from axon.neuron_settings import DEFAULT_CHAT_MODEL
from neuraxis.embedded import EmbeddedOptions


def say(line: str) -> None:
    print(f"neuraxis: {line}", flush=True)


def warn(line: str) -> None:
    print(f"neuraxis: warning: {line}", file=sys.stderr, flush=True)


def error(line: str) -> None:
    print(f"neuraxis: {line}", file=sys.stderr, flush=True)


def quiet(line: str) -> None:
    pass


def auth_line(options: EmbeddedOptions) -> str:
    if options.auth == "required":
        state = f" --state-dir {options.state_dir}" if options.state_dir else ""
        return (
            "auth required: every /v1 request needs a key (neuraxis keys create --tenant "
            f"NAME{state})"
        )
    return (
        f"auth off: cortex listens on {options.host} only, for this machine's users "
        "(--auth required to use API keys)"
    )


def print_banner(options: EmbeddedOptions, model: str = DEFAULT_CHAT_MODEL) -> None:
    """How to call the API (asking `model`), once cortex is ready."""
    base, admin = options.base_url, options.admin_url
    question = "What is the capital of France?"
    message = f'{{"role": "user", "content": "{question}"}}'
    body = f'{{"model": "{model}", "temperature": 0, "messages": [{message}]}}'
    say(f"ready: {base}")
    # With auth required the example needs a key (neuraxis keys create).
    required = options.auth == "required"
    key = '\n    -H "Authorization: Bearer $NEURAXIS_API_KEY" \\' if required else ""
    print(
        f"""
An OpenAI-compatible API at {base}/v1 (model {model}):

  curl {base}/v1/chat/completions -H 'Content-Type: application/json' \\{key}
    -d '{body}'

Metrics for Prometheus at {admin}/metrics, the neurons' at {admin}/sd/neurons.

Press Ctrl-C to stop.
""",
        flush=True,
    )
