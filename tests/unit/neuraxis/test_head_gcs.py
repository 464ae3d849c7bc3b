"""The head's GCS fault tolerance setting: `ray_gcs_storage` checked when the
settings load, and turned into Ray's environment for the head."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from neuraxis.head import HeadSettings, head_env, redis_address


def test_without_storage_the_head_has_no_redis() -> None:
    env = head_env(HeadSettings(), {"PATH": "/usr/bin"})
    assert env == {"PATH": "/usr/bin"}


def test_with_storage_ray_keeps_its_state_in_that_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURAXIS_HEAD_RAY_GCS_STORAGE", "redis://10.0.0.11:6380")
    settings = HeadSettings()
    env = head_env(settings, {"PATH": "/usr/bin"})
    assert env == {
        "PATH": "/usr/bin",
        "RAY_REDIS_ADDRESS": "10.0.0.11:6380",
        "RAY_external_storage_namespace": "neuraxis",
    }
    other = head_env(HeadSettings(ray_gcs_namespace="cluster-b"), {})
    assert other["RAY_external_storage_namespace"] == "cluster-b"


def test_redis_addresses() -> None:
    assert redis_address("redis://redis.internal:6379") == "redis.internal:6379"
    assert redis_address("redis://[fd00::11]:6379") == "[fd00::11]:6379"


@pytest.mark.parametrize(
    "url",
    [
        "10.0.0.11:6379",  # no scheme
        "rediss://10.0.0.11:6379",  # TLS: not wired up
        "redis://10.0.0.11",  # no port
        "redis://:secret@10.0.0.11:6379",  # a password would land in the environment
        "redis://10.0.0.11:6379/2",  # Ray uses no database number
        "redis://10.0.0.11:notaport",
    ],
)
def test_anything_but_redis_host_port_is_refused_at_load(url: str) -> None:
    with pytest.raises(ValidationError, match=r"(not|only) redis://host:port"):
        HeadSettings(ray_gcs_storage=url)
