"""Log lines: text and JSON carry the same fields; "auto" picks text for a
terminal and JSON for systemd, files and pipes; uvicorn's and Ray's loggers
come out through the same handler; Ray's thread warning is silenced."""

from __future__ import annotations

import io
import json
import logging
import re
import shlex
from collections.abc import Iterator
from typing import Any

import pytest

from axon.logs import (
    JsonFormatter,
    TextFormatter,
    configure_logging,
    resolve_format,
)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _request_record() -> logging.LogRecord:
    record = logging.makeLogRecord(
        {
            "name": "neuraxis.cortex.requests",
            "levelno": logging.INFO,
            "levelname": "INFO",
            "msg": "%s %s",
            "args": ("chat", "ok"),
            "request_id": "chat-1",
            "api": "chat",
            "model": "smollm2-135m-instruct",
            "outcome": "ok",
            "duration_s": 0.5123,
            "ttft_s": None,
            "prompt_tokens": 12,
            "output_tokens": 7,
            "note": 'two words and a "quote"',
        }
    )
    return record


def _parse_text(line: str) -> dict[str, Any]:
    """Read a text line back: the head, then key=value pairs (JSON-quoted
    when they hold spaces or quotes)."""
    m = re.match(r"(\S+) (\S+) (\S+)\[(\d+)\] (.*)", line)
    assert m, line
    ts, level, logger, pid, rest = m.groups()
    fields: dict[str, Any] = {"ts": ts, "level": level.lower(), "logger": logger, "pid": int(pid)}
    words = shlex.split(rest, posix=True)
    message = [w for w in words if "=" not in w]
    fields["msg"] = " ".join(message)
    for word in words:
        if "=" in word:
            key, _, value = word.partition("=")
            try:
                fields[key] = json.loads(value)
            except ValueError:
                fields[key] = value
    return fields


def test_text_and_json_lines_carry_the_same_fields() -> None:
    record = _request_record()
    as_json = json.loads(JsonFormatter().format(record))
    as_text = _parse_text(TextFormatter().format(record))
    assert as_json["request_id"] == "chat-1" and as_json["msg"] == "chat ok"
    assert as_text == as_json


def test_a_traceback_is_in_both() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.makeLogRecord({"msg": "failed", "exc_info": __import__("sys").exc_info()})
    as_json = json.loads(JsonFormatter().format(record))
    text = TextFormatter().format(record)
    assert "ValueError: boom" in as_json["exc"]
    assert text.splitlines()[0].endswith("failed")
    assert as_json["exc"] in text


@pytest.mark.parametrize(
    ("tty", "environ", "expected"),
    [
        (True, {}, "text"),
        (False, {}, "json"),
        (True, {"JOURNAL_STREAM": "8:1234"}, "json"),
        (True, {"INVOCATION_ID": "abc"}, "json"),
    ],
)
def test_auto_picks_by_terminal_and_systemd(
    tty: bool, environ: dict[str, str], expected: str
) -> None:
    stream = _Tty() if tty else io.StringIO()
    assert resolve_format("auto", stream, environ) == expected


def test_an_explicit_format_wins_over_auto() -> None:
    assert resolve_format("json", _Tty(), {}) == "json"
    assert resolve_format("text", io.StringIO(), {"JOURNAL_STREAM": "1:2"}) == "text"


def test_configure_logging_writes_the_chosen_format_at_the_level(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    monkeypatch.delenv("INVOCATION_ID", raising=False)
    out = _Tty()
    assert configure_logging("auto", "warning", out) == "text"
    logging.getLogger("neuraxis.test").info("not shown")
    logging.getLogger("neuraxis.test").warning("shown", extra={"request_id": "r-1"})
    (line,) = out.getvalue().splitlines()
    assert " WARNING neuraxis.test[" in line and line.endswith("shown request_id=r-1")


def test_uvicorn_and_ray_log_through_the_same_handler_at_its_level() -> None:
    for name in ("uvicorn.error", "ray"):
        # What they do on their own: a handler of their own, not propagating.
        logging.getLogger(name).addHandler(logging.StreamHandler(io.StringIO()))
        logging.getLogger(name).propagate = False
        # Ray also sets its own level, INFO.
        logging.getLogger(name).setLevel(logging.INFO)
    out = io.StringIO()
    configure_logging("json", "warning", out)
    logging.getLogger("uvicorn.error").warning("from uvicorn")
    logging.getLogger("ray.util").warning("from ray")
    logging.getLogger("ray._private.worker").info("Connecting to existing Ray cluster")
    loggers = [json.loads(line)["logger"] for line in out.getvalue().splitlines()]
    assert loggers == ["uvicorn.error", "ray.util"]


def test_rays_thread_warning_is_silenced_and_its_other_warnings_are_not() -> None:
    out = io.StringIO()
    configure_logging("json", "info", out)
    worker = logging.getLogger("ray._private.worker")
    worker.warning("SIGTERM handler is not set because current thread is not the main thread.")
    worker.warning("something else")
    assert [json.loads(line)["msg"] for line in out.getvalue().splitlines()] == ["something else"]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, "auto"),
        ({"json_logs": True}, "json"),
        ({"json_logs": False}, "text"),
        ({"json_logs": True, "log_format": "text"}, "text"),
    ],
)
def test_the_old_json_logs_setting_still_chooses_the_format(
    given: dict[str, Any], expected: str
) -> None:
    from axon.neuron_settings import NeuronSettings
    from cortex.config import CortexSettings

    assert CortexSettings(**given).log_format == expected
    assert NeuronSettings(**given).log_format == expected
