"""The fuzz run: schemathesis cases for every /v1 operation of a running
cortex's published schema, sent one by one and held to checks.py.

The schema alone would spend most requests on models that do not exist
(`model` is any string) and response ids nobody made, so each case is
nudged, as hypothesis draws: most cases' `model` becomes a served one, and
their response id (path or previous_response_id) one that an earlier
request created (create, then GET, DELETE, cancel, input_items it: the
links the schema publishes); with auth on, two cases in three carry the
valid key, the rest none, a wrong one or another scheme.
Every failure is kept with its curl command; nothing stops the run early,
so one run reports every kind of failure it met.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import HypothesisException
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.failures import Failure as CheckFailure
from schemathesis.core.failures import FailureGroup
from schemathesis.core.parameters import ParameterLocation
from schemathesis.core.result import Err

from tests.fuzz.checks import answer_problems

REQUEST_TIMEOUT_S = 30.0
Operation = APIOperation[Any, Any, Any, Any]
AnyCase = Case[Any]
# schemathesis's checks that hold cortex to its published schema.
SCHEMA_CHECKS = [
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
# How a key-holding target's cases authenticate: None is the valid key.
_WRONG_AUTH = ["", "Bearer nx-not-a-key", "Basic dXNlcjpwYXNz", "Bearer"]


@dataclass(frozen=True)
class Target:
    """A running cortex: its URL, the models it serves and, with auth
    required, a valid key."""

    label: str
    base_url: str
    models: tuple[str, ...]
    key: str | None = None


@dataclass(frozen=True)
class Failure:
    operation: str
    problems: list[str]
    curl: str


@dataclass
class Tally:
    """What a run did: requests sent, answers by status and by operation,
    failures, and cases schemathesis could not generate (not a server fault)."""

    requests: int = 0
    by_status: Counter[int] = field(default_factory=Counter)
    by_operation: Counter[str] = field(default_factory=Counter)
    by_operation_status: Counter[tuple[str, int]] = field(default_factory=Counter)
    # "<operation> <status> <param>" of each error answer, and one message
    # of each: what the 4xx were about (coverage, not pass/fail).
    error_params: Counter[str] = field(default_factory=Counter)
    error_messages: dict[str, str] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    generation_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.by_status.items() if status >= 500)

    def summary(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "by_status": {str(s): n for s, n in sorted(self.by_status.items())},
            "4xx": sum(n for s, n in self.by_status.items() if 400 <= s < 500),
            "5xx": self.server_errors,
            "by_operation": {
                op: {
                    "requests": n,
                    **{
                        str(s): k
                        for (o, s), k in sorted(self.by_operation_status.items())
                        if o == op
                    },
                }
                for op, n in sorted(self.by_operation.items())
            },
            "error_params": {
                k: [n, self.error_messages[k]] for k, n in self.error_params.most_common()
            },
            "failures": len(self.failures),
            "failure_kinds": dict(
                Counter(f"{f.operation}: {f.problems[0][:80]}" for f in self.failures)
            ),
            "generation_errors": self.generation_errors,
            "seconds": round(self.seconds, 1),
        }


@dataclass(frozen=True)
class _Nudge:
    """What a case is nudged with, drawn by hypothesis so that a seed replays
    it. Hypothesis leans to small values, so 0 is the nudge: keep what was
    generated only when asked (`keep_model`, `keep_id`)."""

    keep_model: bool
    keep_id: bool
    pick: int  # which served model, which created response
    auth: int  # below _VALID_AUTH the valid key, above it _WRONG_AUTH's


_VALID_AUTH = 8  # of 12: a third of a key-holding target's cases authenticate wrongly


def _nudges() -> st.SearchStrategy[_Nudge]:
    return st.builds(
        _Nudge,
        keep_model=st.integers(0, 7).map(lambda v: v == 7),
        keep_id=st.integers(0, 5).map(lambda v: v == 5),
        pick=st.integers(0, 1 << 16),
        auth=st.integers(0, _VALID_AUTH + len(_WRONG_AUTH) - 1),
    )


MODES = (GenerationMode.NEGATIVE, GenerationMode.POSITIVE)


def _has_body(op: Operation) -> bool:
    return op.body is not None and len(op.body) > 0


def _negated_headers(case: AnyCase) -> bool:
    """Whether the case was made invalid in its headers (the bearer key
    left out, say): adding the valid key would make it valid again."""
    if case.meta is None or not case.meta.generation.mode.is_negative:
        return False
    # A case may be negated in several components: each has its own mode.
    return any(
        location == ParameterLocation.HEADER and info.mode.is_negative
        for location, info in case.meta.components.items()
    )


def _session_order(op: Operation) -> tuple[int, str, str]:
    if (op.method, op.path) == ("post", "/v1/responses"):
        rank = 0
    elif op.method == "delete":
        rank = 2
    else:
        rank = 1
    return rank, op.path, op.method


class Fuzzer:
    """Sends cases to one target and tallies what came back."""

    def __init__(self, target: Target, session: requests.Session) -> None:
        self.target = target
        self.session = session
        self.tally = Tally()
        self.created: list[str] = []  # response ids the target has made

    def operations(self) -> list[Operation]:
        """The /v1 operations of the target's own published schema, in the
        order of a session: create responses first, delete them last."""
        schema = schemathesis.openapi.from_url(f"{self.target.base_url}/openapi.json")
        operations = []
        for result in schema.get_all_operations():
            if isinstance(result, Err):
                raise result.err()  # the published schema is broken: say so
            operations.append(result.ok())
        v1 = [op for op in operations if op.path.startswith("/v1/")]
        return sorted(v1, key=_session_order)

    def run(self, budget: int, run_seed: int) -> Tally:
        """Send `budget` cases, shared evenly over every operation in both
        generation modes; a share schemathesis cannot fill (no negative value
        of a free string) passes to the next, and what is left at the end
        to the operations with bodies."""
        started = time.monotonic()
        self.seed_responses()
        operations = self.operations()
        pairs = [(op, mode) for op in operations for mode in MODES]
        pairs += [(op, GenerationMode.POSITIVE) for op in operations if _has_body(op)]
        for i, (op, mode) in enumerate(pairs):
            left = budget - self.tally.requests
            share = left // (len(pairs) - i)
            if share > 0:
                self._run_operation(op, mode, share, run_seed + i)
        self.tally.seconds = time.monotonic() - started
        return self.tally

    def _run_operation(
        self, op: Operation, mode: GenerationMode, count: int, case_seed: int
    ) -> None:
        @seed(case_seed)
        @settings(
            max_examples=count,
            deadline=None,
            database=None,
            derandomize=False,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=op.as_strategy(generation_mode=mode), nudge=_nudges())
        def send(case: AnyCase, nudge: _Nudge) -> None:
            self._send(self._nudged(case, nudge), nudge)

        try:
            send()
        except HypothesisException as e:
            # Unsatisfiable (no negative value of a free string) and the
            # like: schemathesis had no more cases, the server was not asked.
            self.tally.generation_errors.append(f"{op.method} {op.path} {mode.value}: {e!r}"[:300])

    def _nudged(self, case: AnyCase, nudge: _Nudge) -> AnyCase:
        models, ids = self.target.models, self.created
        path = case.path_parameters or {}
        body = case.body if isinstance(case.body, dict) else {}
        # A case generated invalid stays invalid: only a valid one gets a
        # served model (an invalid `model` made valid would be a valid case).
        positive = case.meta is not None and not case.meta.generation.mode.is_negative
        if positive and not nudge.keep_model:
            model = models[nudge.pick % len(models)]
            if isinstance(body.get("model"), str):
                body["model"] = model
            if "model_id" in path:
                path["model_id"] = model
        if not nudge.keep_id and ids:
            response_id = ids[nudge.pick % len(ids)]
            if "response_id" in path:
                path["response_id"] = response_id
            if "previous_response_id" in body:
                body["previous_response_id"] = response_id
        return case

    def _headers(self, nudge: _Nudge) -> dict[str, str]:
        if self.target.key is None:
            return {}
        if nudge.auth < _VALID_AUTH:
            return {"Authorization": f"Bearer {self.target.key}"}
        wrong = _WRONG_AUTH[nudge.auth - _VALID_AUTH]
        return {"Authorization": wrong} if wrong else {}

    def _send(self, case: AnyCase, nudge: _Nudge) -> None:
        name = f"{case.method} {case.operation.path}"
        headers = {} if _negated_headers(case) else self._headers(nudge)
        self.tally.requests += 1
        self.tally.by_operation[name] += 1
        try:
            response = case.call(
                base_url=self.target.base_url,
                session=self.session,
                headers=headers,
                timeout=REQUEST_TIMEOUT_S,
            )
        except requests.RequestException as e:
            # A hang (past the per-request timeout) or a dropped connection.
            self._fail(name, [f"no answer: {type(e).__name__}: {e}"[:300]], case, headers)
            return
        status = response.status_code
        self.tally.by_status[status] += 1
        self.tally.by_operation_status[name, status] += 1
        content_type = response.headers.get("content-type", [""])[0]
        problems = answer_problems(status, content_type, response.text_lossy())
        problems += self._schema_problems(case, response, headers)
        if problems:
            self._fail(name, problems, case, headers)
        elif status >= 400:
            self._count_error(name, status, response)
        elif status == 200:
            self._follow(case, response)

    def _schema_problems(
        self, case: AnyCase, response: schemathesis.Response, headers: dict[str, str]
    ) -> list[str]:
        """schemathesis's own verdicts against the published schema: a
        status and content type it documents, a body its schema allows, and
        a case generated invalid refused."""
        try:
            case.validate_response(response, checks=SCHEMA_CHECKS, headers=headers)
        except FailureGroup as group:
            return [f"{f.title}: {f.message}"[:300] for f in group.exceptions]
        except CheckFailure as failure:
            return [f"{failure.title}: {failure.message}"[:300]]
        return []

    def _count_error(self, name: str, status: int, response: schemathesis.Response) -> None:
        error = response.json()["error"]
        key = f"{name} {status} {error['param']}"
        self.tally.error_params[key] += 1
        self.tally.error_messages.setdefault(key, str(error["message"])[:160])

    def _follow(self, case: AnyCase, response: schemathesis.Response) -> None:
        """Keep the ids of the responses the target made (and forget the
        deleted ones): the cases of the id routes use them."""
        path = case.operation.path
        if case.method == "DELETE" and case.path_parameters:
            deleted = case.path_parameters.get("response_id")
            if deleted in self.created:
                self.created.remove(deleted)
        elif case.method == "POST" and path == "/v1/responses":
            try:
                made = response.json()
            except ValueError:
                return  # a stream: its id is in the events, not needed
            if isinstance(made, dict) and isinstance(made.get("id"), str):
                self.created.append(made["id"])

    def seed_responses(self) -> None:
        """Stored responses and background ones to start from, so that the
        id routes are fuzzed on real ids from the first case."""
        headers = {"Authorization": f"Bearer {self.target.key}"} if self.target.key else {}
        for background in (False, True) * 2:
            body: dict[str, Any] = {"model": self.target.models[0], "input": "hi"}
            body |= {"max_output_tokens": 4, "background": background}
            made = self.session.post(
                f"{self.target.base_url}/v1/responses",
                json=body,
                headers=headers,
                timeout=REQUEST_TIMEOUT_S,
            )
            made.raise_for_status()
            self.created.append(made.json()["id"])

    def _fail(self, name: str, problems: list[str], case: AnyCase, headers: dict[str, str]) -> None:
        curl = case.as_curl_command(headers=headers)
        self.tally.failures.append(Failure(name, problems, curl))
