"""Logging set-up shared by the neuraxis services: one line per record, as a
JSON object (for journald, files, log collectors) or as text (for a person at
a terminal), with the same fields either way; and the third-party records that
say nothing to the user, silenced where they are logged.

Log records about a request pass `extra={"request_id": ..., ...}`; both
formatters copy such extra fields into the line. Prompts and outputs are
never logged: callers pass sizes and counts, not text.

What is *not* here: which lines `neuraxis up` prints about its own progress
(neuraxis/progress.py), and the services' choice of format and level
(their settings: `log_format`, `log_level`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, Literal, Self, TextIO

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings

LogFormat = Literal["auto", "text", "json"]
LogLevel = Literal["debug", "info", "warning", "error"]


class LogSettings(BaseSettings):
    """The logging settings every service has; cortex's and the neuron's
    settings classes derive from it (each with its own env prefix)."""

    log_format: LogFormat = Field(
        "auto",
        description="log lines as text (for a terminal) or JSON objects; auto: text on a "
        "terminal, JSON under systemd or into a file or pipe",
    )
    log_level: LogLevel = Field("info", description="the least severe log lines written")
    json_logs: bool | None = Field(
        None, description="deprecated: log_format = json (true) or text (false)"
    )

    @model_validator(mode="after")
    def _old_json_logs(self) -> Self:
        """The old spelling sets the format, unless log_format is given too."""
        if self.json_logs is not None and "log_format" not in self.model_fields_set:
            self.log_format = "json" if self.json_logs else "text"
        return self


# Attributes every LogRecord has; anything else came in through `extra`.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}

# Loggers that write through their own handlers unless told otherwise; they
# are routed through ours so that every line has one format.
_ADOPTED = ("uvicorn", "uvicorn.error", "uvicorn.access", "ray", "vllm")

# (logger, start of the message): records that tell the user nothing they can
# act on. Each is dropped where it is logged, not hidden by a level.
_SILENCED: tuple[tuple[str, str], ...] = (
    # cortex joins Ray from a worker thread on purpose: Ray's SIGTERM handler
    # (sys.exit) would cut uvicorn's graceful shutdown short.
    ("ray._private.worker", "SIGTERM handler is not set"),
)


def record_fields(record: logging.LogRecord, formatter: logging.Formatter) -> dict[str, Any]:
    """The fields of one line, in order: ts, level, logger, pid, msg, then
    the record's extra fields, then `exc` (the traceback) if there is one."""
    out: dict[str, Any] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
        "pid": record.process,
        "msg": record.getMessage(),
    }
    for key, value in vars(record).items():
        if key not in _STANDARD and not key.startswith("_"):
            out[key] = value
    if record.exc_info:
        out["exc"] = formatter.formatException(record.exc_info)
    return out


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(record_fields(record, self), default=str)


class TextFormatter(logging.Formatter):
    """`2026-11-23T07:31:02.123Z INFO neuraxis.cortex.requests[4242] chat ok
    request_id=chat-1 api=chat duration_s=0.51`: the JSON line's fields, for
    reading. A value with a space or a quote is quoted; a traceback follows on
    its own lines."""

    def format(self, record: logging.LogRecord) -> str:
        fields = record_fields(record, self)
        exc = fields.pop("exc", None)
        head = (
            f"{fields.pop('ts')} {str(fields.pop('level')).upper()} "
            f"{fields.pop('logger')}[{fields.pop('pid')}] {fields.pop('msg')}"
        )
        line = " ".join([head, *(f"{k}={_text_value(v)}" for k, v in fields.items())])
        return f"{line}\n{exc}" if exc else line


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text == "" or any(c in text for c in ' "=\n'):
        return json.dumps(text)
    return text


def resolve_format(
    log_format: LogFormat, stream: TextIO, environ: Mapping[str, str] | None = None
) -> Literal["text", "json"]:
    """ "auto": text for a person at a terminal; JSON under systemd (whose
    journal is read by machines too, even when stderr is a TTY) or when the
    output goes to a file or a pipe."""
    if log_format != "auto":
        return log_format
    env = os.environ if environ is None else environ
    if env.get("JOURNAL_STREAM") or env.get("INVOCATION_ID"):
        return "json"
    isatty = getattr(stream, "isatty", None)
    return "text" if isatty is not None and isatty() else "json"


class _Silence(logging.Filter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self._prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self._prefix)


def configure_logging(
    log_format: LogFormat = "auto", level: LogLevel = "info", stream: TextIO | None = None
) -> Literal["text", "json"]:
    """One handler on the root logger, in the resolved format; returns it."""
    out = stream or sys.stderr
    chosen = resolve_format(log_format, out)
    handler = logging.StreamHandler(out)
    handler.setFormatter(TextFormatter() if chosen == "text" else JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in _ADOPTED:
        adopted = logging.getLogger(name)
        adopted.handlers[:] = []
        adopted.propagate = True
        # Ray sets INFO on its logger: it would pass INFO past a quieter root.
        adopted.setLevel(logging.NOTSET)
    for name, prefix in _SILENCED:
        silenced = logging.getLogger(name)
        if not any(isinstance(f, _Silence) for f in silenced.filters):
            silenced.addFilter(_Silence(prefix))
    return chosen
