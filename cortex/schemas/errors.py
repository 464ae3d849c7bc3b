"""The OpenAI error envelope: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

from pydantic import BaseModel


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorEnvelope(BaseModel):
    error: ErrorBody
