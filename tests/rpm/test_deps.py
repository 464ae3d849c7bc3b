"""Requires, provides and conflicts: of the binary RPMs built here, and of the
GPU flavours as their source RPMs would build them (the spec inside each
source RPM, queried with rpmspec)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.rpm.conftest import FLAVOURS, GPU_FLAVOURS, RELEASE, VERSION, Packages, rpm_query

NEVR = f"{VERSION}-{RELEASE}"


def relations(lines: list[str]) -> set[str]:
    """Without rpm's own rpmlib() capabilities."""
    return {line.strip() for line in lines if not line.startswith("rpmlib(")}


def test_common(packages: Packages) -> None:
    assert relations(rpm_query(packages.common, "--requires")) == {
        "/bin/sh",
        "coreutils",
        "firewalld-filesystem",
    }
    provides = relations(rpm_query(packages.common, "--provides"))
    assert {"user(neuraxis)", "group(neuraxis)", f"neuraxis-common = {NEVR}"} <= provides


def test_cortex(packages: Packages) -> None:
    assert relations(rpm_query(packages.cortex, "--requires")) == {
        f"neuraxis-common = {NEVR}",
        "python3.11",
        "glibc >= 2.34",
    }
    assert relations(rpm_query(packages.cortex, "--conflicts")) == set()
    provides = relations(rpm_query(packages.cortex, "--provides"))
    assert {"user(neuraxis-cortex)", "group(neuraxis-cortex)"} <= provides


def test_the_cpu_neuron(packages: Packages) -> None:
    requires = relations(rpm_query(packages.neuron_cpu, "--requires"))
    assert requires == {f"neuraxis-common = {NEVR}", "python3.11", "glibc >= 2.34"}
    provides = relations(rpm_query(packages.neuron_cpu, "--provides"))
    assert f"neuraxis-neuron = {NEVR}" in provides
    assert relations(rpm_query(packages.neuron_cpu, "--conflicts")) == {
        "neuraxis-neuron-ampere",
        "neuraxis-neuron-ada",
        "neuraxis-neuron-hopper",
        "neuraxis-neuron-blackwell",
    }


@pytest.fixture(scope="module")
def unpacked_srpms(packages: Packages, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each source RPM's files (spec and sources) in a directory of its own."""
    out = tmp_path_factory.mktemp("srpms")
    for name, srpm in packages.srpms.items():
        top = out / name
        subprocess.run(
            ["rpm", "-i", "--nodeps", "--define", f"_topdir {top}", str(srpm)],
            check=True,
            capture_output=True,
        )
        for path in [*(top / "SOURCES").iterdir(), *(top / "SPECS").iterdir()]:
            path.rename(top / path.name)
        (top / "SOURCES").rmdir()
        (top / "SPECS").rmdir()
    return out


def spec_query(directory: Path, name: str, what: str) -> set[str]:
    out = subprocess.run(
        [
            "rpmspec",
            "-q",
            "--define",
            f"_sourcedir {directory}",
            f"--{what}",
            str(directory / f"{name}.spec"),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return relations(out.splitlines())


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_each_source_rpm_builds_its_own_flavour(unpacked_srpms: Path, flavour: str) -> None:
    name = f"neuraxis-neuron-{flavour}"
    directory = unpacked_srpms / name
    # Everything the build needs travels in the source RPM.
    assert {p.name for p in directory.iterdir()} == {
        f"{name}.spec",
        f"neuraxis-{VERSION}.tar.gz",
        f"{flavour}.txt",
        "macros.neuraxis",
    }
    assert (directory / f"{flavour}.txt").read_text() == (
        Path(__file__).resolve().parents[2] / "rpm" / "locks" / f"{flavour}.txt"
    ).read_text()
    assert f"{name} = {NEVR}" in spec_query(directory, name, "provides")
    assert f"neuraxis-neuron = {NEVR}" in spec_query(directory, name, "provides")
    assert spec_query(directory, name, "conflicts") == {
        f"neuraxis-neuron-{other}" for other in FLAVOURS if other != flavour
    }
    requires = spec_query(directory, name, "requires")
    assert {f"neuraxis-common = {NEVR}", "python3.11", "glibc >= 2.34"} <= requires
    # GPU flavours compile Triton's launcher stubs on the host.
    gpu_only = {"gcc", "python3.11-devel"}
    assert (gpu_only <= requires) == (flavour in GPU_FLAVOURS)
    assert not (gpu_only & requires) or flavour in GPU_FLAVOURS


@pytest.mark.parametrize("flavour", GPU_FLAVOURS)
def test_a_gpu_source_rpm_builds_up_to_its_payload(
    packages: Packages, flavour: str, tmp_path: Path
) -> None:
    """%prep and %build of the GPU flavour run here (the neuraxis wheel, and the
    neuron.toml naming the flavour's generation); the payload itself, CUDA
    wheels of ~10 GB, is `make rpm-gpu`'s on a host with the disk."""
    srpm = packages.srpms[f"neuraxis-neuron-{flavour}"]
    result = subprocess.run(
        ["rpmbuild", "-rc", "--nodeps", "--define", f"_topdir {tmp_path}", str(srpm)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    build = tmp_path / "BUILD" / f"neuraxis-{VERSION}"
    assert (build / "dist" / f"neuraxis-{VERSION}-py3-none-any.whl").is_file()
    lines = (build / "neuron.toml").read_text().splitlines()
    assert [line for line in lines if line.startswith("generation")] == [
        f'generation = "{flavour}"'
    ]
