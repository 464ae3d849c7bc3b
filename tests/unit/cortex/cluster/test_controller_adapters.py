"""`neuraxis adapters add | remove | list` as the controller carries them
out, over the fake backend: which replicas are told, what a refusal leaves
alone, what replicas started later and a later controller serve."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from axon.errors import InvalidRequestError, ModelNotFoundError, UnavailableError
from axon.generations import Generation
from cortex.cluster.adapter_sync import stale
from cortex.cluster.controller import Controller, ControllerConfig
from cortex.cluster.spec import DeploymentSpec
from harness.clock import ManualClock, settle, until
from tests.unit.cortex.cluster.fakes import FakeBackend, node

ADA = node("n-ada", Generation.ADA, gpus=4)


def chat(replicas: int = 2, adapters: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "id": "chat",
        "source": "sim",
        "replicas": replicas,
        "min_generation": "ada",
        "engine": {"kind": "sim"},
        "lora": {"max_adapters_per_replica": 2, "max_rank": 16},
        "adapters": adapters or [],
    }


def spec(*models: dict[str, Any]) -> DeploymentSpec:
    return DeploymentSpec.model_validate({"models": list(models)})


def adapter_dir(root: Path, name: str, rank: int = 8) -> str:
    path = root / name
    path.mkdir()
    (path / "adapter_config.json").write_text(json.dumps({"r": rank}))
    return str(path)


async def started(
    deployment: DeploymentSpec, backend: FakeBackend | None = None
) -> tuple[Controller, FakeBackend, ManualClock]:
    clock = backend.clock if backend is not None else ManualClock(0.0)
    backend = backend or FakeBackend([ADA], clock)
    controller = Controller(backend, clock, ControllerConfig(health_interval_s=1.0))
    await controller.apply(deployment, start_loop=False)
    await settle()
    return controller, backend, clock


async def tick(controller: Controller, clock: ManualClock) -> None:
    await clock.elapse(1.0)
    await controller.tick()
    await settle()


def served(backend: FakeBackend) -> dict[str, dict[str, str]]:
    return {r: a.adapters for r, a in sorted(backend.actors.items()) if a.started}


async def test_an_added_adapter_is_loaded_on_every_ready_replica_and_saved(
    tmp_path: Path,
) -> None:
    controller, backend, _ = await started(spec(chat()))
    source = adapter_dir(tmp_path, "legal")
    done = await controller.add_adapter("chat", "legal", source)
    replicas = sorted(backend.actors)
    assert done["replicas"] == replicas and done["pending"] == {}
    assert len(done["addresses"]) == 2
    assert all(a == {"legal": source} for a in served(backend).values())
    assert backend.adapter_changes == {
        "added": [{"model": "chat", "id": "legal", "source": source}],
        "removed": [],
    }


async def test_a_bad_source_is_refused_and_no_replica_is_touched(tmp_path: Path) -> None:
    controller, backend, _ = await started(spec(chat()))
    with pytest.raises(InvalidRequestError, match="rank 32 is above max_rank 16"):
        await controller.add_adapter("chat", "big", adapter_dir(tmp_path, "big", rank=32))
    with pytest.raises(ModelNotFoundError):
        await controller.add_adapter("nope", "a", adapter_dir(tmp_path, "a"))
    assert backend.adapter_calls == [] and backend.adapter_changes is None


async def test_a_source_the_first_replica_refuses_is_taken_back_and_nothing_is_saved(
    tmp_path: Path,
) -> None:
    controller, backend, _ = await started(spec(chat()))
    source = adapter_dir(tmp_path, "refused")
    with pytest.raises(InvalidRequestError, match="cannot be loaded"):
        await controller.add_adapter("chat", "refused", source)
    first, second = sorted(backend.actors)
    # The first replica alone was asked, and took back what it had kept.
    assert backend.adapter_calls == [
        ("load", first, "refused"),
        ("unload", first, "refused"),
    ]
    assert served(backend) == {first: {}, second: {}}
    assert backend.adapter_changes is None
    assert (
        controller.status() is not None and "refused" not in controller.adapters.serving.adapters()
    )


async def test_a_replica_that_cannot_be_told_now_is_synced_by_a_later_pass(
    tmp_path: Path,
) -> None:
    controller, backend, clock = await started(spec(chat()))
    first, second = sorted(backend.actors)
    backend.adapter_errors[second] = UnavailableError("not answering")
    source = adapter_dir(tmp_path, "legal")
    done = await controller.add_adapter("chat", "legal", source)
    assert done["replicas"] == [first] and second in done["pending"]
    del backend.adapter_errors[second]
    await tick(controller, clock)
    await until(lambda: backend.actors[second].adapters == {"legal": source})


async def test_replicas_started_later_serve_the_added_adapters(tmp_path: Path) -> None:
    controller, backend, _ = await started(spec(chat(replicas=1)))
    source = adapter_dir(tmp_path, "legal")
    await controller.add_adapter("chat", "legal", source)
    await controller.apply(spec(chat(replicas=2)), start_loop=False)
    await settle()
    newest = max(backend.actors, key=lambda r: backend.actors[r].request.serial)
    assert json.loads(backend.actors[newest].env["NEURAXIS_NEURON_ADAPTERS"]) == [f"legal={source}"]


async def test_remove_unloads_everywhere_and_a_spec_adapter_stays_removed(
    tmp_path: Path,
) -> None:
    deployment = spec(chat(adapters=[{"id": "support", "source": "/srv/support"}]))
    controller, backend, _ = await started(deployment)
    assert all(a == {"support": "/srv/support"} for a in served(backend).values())
    done = await controller.remove_adapter("support")
    assert done["model"] == "chat" and done["replicas"] == sorted(backend.actors)
    assert all(a == {} for a in served(backend).values())
    # cortex applies its spec file again (a controller that came back): the
    # removal is laid over it.
    await controller.apply(deployment, start_loop=False)
    assert controller.adapters.serving.adapters() == {}
    with pytest.raises(ModelNotFoundError, match="'support' does not exist"):
        await controller.remove_adapter("support")


async def test_a_new_controller_serves_the_saved_changes_and_syncs_adopted_replicas(
    tmp_path: Path,
) -> None:
    controller, backend, clock = await started(spec(chat()))
    source = adapter_dir(tmp_path, "legal")
    await controller.add_adapter("chat", "legal", source)
    # While no controller runs, one replica's neuron lost the adapter.
    first, second = sorted(backend.actors)
    backend.actors[second].adapters.clear()
    successor, _, _ = await started(spec(chat()), backend)
    assert successor.adapters.serving.adapters() == {"legal": "chat"}
    await tick(successor, clock)
    await until(lambda: backend.actors[second].adapters == {"legal": source})
    listed = await successor.list_adapters()
    assert listed == {
        "adapters": [
            {
                "id": "legal",
                "model": "chat",
                "source": source,
                "added_at_run_time": True,
                "replicas": [first, second],
                "held_by": [first, second],
            }
        ],
        "unreachable": [],
        "addresses": {r: backend.actors[r].address for r in (first, second)},
    }


async def test_an_id_added_again_from_a_new_source_is_reloaded_where_the_old_one_stayed(
    tmp_path: Path,
) -> None:
    controller, backend, _ = await started(spec(chat()))
    first, second = sorted(backend.actors)
    old, new = adapter_dir(tmp_path, "legal-v1"), adapter_dir(tmp_path, "legal-v2")
    await controller.add_adapter("chat", "legal", old)
    # The remove does not reach the second replica: it keeps the old weights.
    backend.adapter_errors[second] = UnavailableError("not answering")
    done = await controller.remove_adapter("legal")
    assert done["replicas"] == [first] and second in done["pending"]
    del backend.adapter_errors[second]
    backend.adapter_calls.clear()
    done = await controller.add_adapter("chat", "legal", new)
    assert done["replicas"] == [first, second] and done["pending"] == {}
    assert served(backend) == {first: {"legal": new}, second: {"legal": new}}
    # The second replica's old adapter was taken off before the new one was
    # loaded (a neuron keeps what it holds when asked to load the same id).
    assert backend.adapter_calls == [
        ("load", first, "legal"),
        ("unload", second, "legal"),
        ("load", second, "legal"),
    ]


def test_stale_adapters_are_those_synced_from_another_source() -> None:
    want = {"a": "/srv/a-v2", "b": "/srv/b"}
    assert stale({"a": "/srv/a-v1", "b": "/srv/b"}, {"a", "b"}, want) == {"a"}
    assert stale({"a": "/srv/a-v2"}, {"a"}, want) == set()
    # Not served there: loaded, not reloaded; never synced: not known.
    assert stale({"a": "/srv/a-v1"}, set(), want) == set()
    assert stale(None, {"a"}, want) == set()


async def test_the_table_carries_every_adapter_served_and_a_change_reaches_it_at_once(
    tmp_path: Path,
) -> None:
    deployment = spec(chat(adapters=[{"id": "support", "source": "/srv/support"}]))
    controller, _, _ = await started(deployment)
    assert controller.table.adapters == {"support": "chat"}
    version = controller.table.version
    await controller.add_adapter("chat", "legal", adapter_dir(tmp_path, "legal"))
    # Published with the change, before any pass: cortex wakes the base of an
    # added adapter, and forgets a removed one.
    assert controller.table.adapters == {"support": "chat", "legal": "chat"}
    assert controller.table.version == version + 1
    assert controller.status().models[0].adapters == ["support", "legal"]  # neuraxis status
    await controller.remove_adapter("support")
    table = await controller.table.wait(version + 1, 0.01, controller.table.epoch)
    assert table["adapters"] == {"legal": "chat"}
