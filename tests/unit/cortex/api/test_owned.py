"""A stored object is its tenant's alone (another tenant's reads as missing),
and lists come as OpenAI's page."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from starlette.requests import Request

from axon.errors import NotFoundError
from cortex.api.owned import list_page, owned
from cortex.auth.principal import Principal
from cortex.http.context import context_of


@dataclass
class _Record:
    tenant: str


def _request_of(tenant: str) -> Request:
    request = Request({"type": "http", "state": {}})
    context_of(request).principal = Principal(tenant=tenant)
    return request


def test_the_callers_own_object_is_returned() -> None:
    record = _Record("acme")
    assert owned(_request_of("acme"), record, NotFoundError("no")) is record


@pytest.mark.parametrize("record", [None, _Record("globex")])
def test_a_missing_or_another_tenants_object_answers_the_same(record: _Record | None) -> None:
    missing = NotFoundError("No such thing: x", param="id")
    with pytest.raises(NotFoundError) as raised:
        owned(_request_of("acme"), record, missing)
    assert raised.value is missing


def test_a_page_says_its_ends_and_whether_more_follow() -> None:
    objects = [{"id": f"o{i}"} for i in range(3)]
    page = list_page(objects, 2)
    assert page == {
        "object": "list",
        "data": objects[:2],
        "first_id": "o0",
        "last_id": "o1",
        "has_more": True,
    }
    assert list_page(objects, 3)["has_more"] is False


def test_an_empty_page_has_no_ends() -> None:
    assert list_page([], 5) == {
        "object": "list",
        "data": [],
        "first_id": None,
        "last_id": None,
        "has_more": False,
    }
