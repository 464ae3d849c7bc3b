"""Tests of the built RPMs (`make rpm-test`, which builds them first).

They read the packages from $NEURAXIS_RPM_DIR (default build/rpm) and install
them once per session into a scratch root (`rpm -i --root DIR --nodeps`),
removed at the end. Outside `make rpm-test` (NEURAXIS_RPM_TESTS unset) they
are deselected: building the packages takes minutes and `make test` does not.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
RPM_DIR = Path(os.environ.get("NEURAXIS_RPM_DIR", ROOT / "build" / "rpm")).resolve()
ENABLED = os.environ.get("NEURAXIS_RPM_TESTS") == "1"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
RELEASE = os.environ.get("NEURAXIS_RPM_RELEASE", "1")
FLAVOURS = ("cpu", "ampere", "ada", "hopper", "blackwell")
GPU_FLAVOURS = ("ampere", "ada", "hopper", "blackwell")


def lock_module() -> ModuleType:
    """rpm/lock.py (a script, not a package module)."""
    spec = importlib.util.spec_from_file_location("neuraxis_rpm_lock", ROOT / "rpm" / "lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def pytest_report_header() -> str:
    if ENABLED:
        return f"neuraxis RPM tests on {RPM_DIR}"
    return "tests/rpm deselected (make rpm-test builds the RPMs and runs them)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if ENABLED:
        return
    here = Path(__file__).parent
    ours = [item for item in items if here in Path(str(item.path)).parents]
    if ours:
        config.hook.pytest_deselected(items=ours)
        items[:] = [item for item in items if item not in ours]


@dataclass(frozen=True)
class Packages:
    common: Path
    cortex: Path
    neuron_cpu: Path
    srpms: dict[str, Path]  # source package name -> path

    @property
    def binaries(self) -> list[Path]:
        return [self.common, self.cortex, self.neuron_cpu]


def _built(path: Path) -> Path:
    if not path.is_file():
        pytest.fail(f"{path} is missing: `make rpm-test` builds the packages before the tests")
    return path


@pytest.fixture(scope="session")
def packages() -> Packages:
    nevr = f"{VERSION}-{RELEASE}"
    srpms = {
        name: _built(RPM_DIR / "SRPMS" / f"{name}-{nevr}.src.rpm")
        for name in ["neuraxis", *(f"neuraxis-neuron-{f}" for f in FLAVOURS)]
    }
    return Packages(
        common=_built(RPM_DIR / "RPMS" / "noarch" / f"neuraxis-common-{nevr}.noarch.rpm"),
        cortex=_built(RPM_DIR / "RPMS" / "x86_64" / f"neuraxis-cortex-{nevr}.x86_64.rpm"),
        neuron_cpu=_built(RPM_DIR / "RPMS" / "x86_64" / f"neuraxis-neuron-cpu-{nevr}.x86_64.rpm"),
        srpms=srpms,
    )


def rpm_query(package: Path, *args: str) -> list[str]:
    out = subprocess.run(
        ["rpm", "-qp", *args, str(package)], check=True, capture_output=True, text=True
    ).stdout
    return out.splitlines()


# The system users the packages' %pre scriptlets make (test_units keeps their
# lines and these files equal).
SYSUSERS = ("neuraxis.conf", "neuraxis-cortex.conf", "neuraxis-neuron.conf")


@pytest.fixture(scope="session")
def scratch_root(packages: Packages) -> Iterator[Path]:
    """The three binary RPMs installed into an empty directory, as rpm would
    on a host, minus what needs the host (scriptlets find none of their tools
    there and do nothing). The %pre scriptlets' users are made first
    (systemd-sysusers --root), so that files get their owners and groups;
    /dev/urandom is a plain file of random bytes, so that cortex's %post
    makes the Ray token; and the TLS files cortex's %post makes with the
    installed command (absent Python in the root) are made as it would."""
    root = RPM_DIR / "scratch-root"
    shutil.rmtree(root, ignore_errors=True)
    (root / "dev").mkdir(parents=True)
    (root / "dev" / "urandom").write_bytes(os.urandom(64))
    (root / "etc").mkdir()  # sysusers locks etc/passwd there
    sysusers = [str(ROOT / "deploy/sysusers.d" / name) for name in SYSUSERS]
    subprocess.run(["systemd-sysusers", f"--root={root}", *sysusers], check=True)
    result = subprocess.run(
        ["rpm", "-i", "--root", str(root), "--nodeps", *map(str, packages.binaries)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        pytest.fail(f"rpm -i --root failed ({result.returncode}): {result.stderr}")
    _post_install_tls(root, packages.cortex)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def post_install_tls_command(cortex: Path) -> list[str]:
    """The `neuraxis tls init` command neuraxis-cortex's %post runs."""
    script = "\n".join(rpm_query(cortex, "--scripts"))
    post = script.split("postinstall scriptlet", 1)[1].split("scriptlet (using", 1)[0]
    call = re.search(r'run\(("/opt/neuraxis/cortex/bin/neuraxis", "tls", "init", [^)]*)\)', post)
    assert call, post
    return re.findall(r'"([^"]*)"', call.group(1))


def _post_install_tls(root: Path, cortex: Path) -> None:
    """That command, where the root looks installed and its users are the
    host's (its passwd and group over the namespace's copy of /etc)."""
    users = 'mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/group && shift 2 && "$@"'
    command = ["sh", "-c", users, "sh", str(root / "etc/passwd"), str(root / "etc/group")]
    with tempfile.TemporaryDirectory(prefix="nx-tls-") as scratch:
        result = subprocess.run(
            as_installed(root, Path(scratch), [*command, *post_install_tls_command(cortex)]),
            capture_output=True,
            text=True,
        )
    if result.returncode != 0:
        pytest.fail(f"the %post's tls init failed ({result.returncode}): {result.stderr}")


def scratch_ids(root: Path) -> tuple[dict[str, tuple[int, int]], dict[str, int]]:
    """The scratch root's users (name -> uid, gid) and groups (name -> gid)."""
    users = {}
    for line in (root / "etc/passwd").read_text().splitlines():
        name, _, uid, gid, *_ = line.split(":")
        users[name] = (int(uid), int(gid))
    groups = {}
    for line in (root / "etc/group").read_text().splitlines():
        name, _, gid, *_ = line.split(":")
        groups[name] = int(gid)
    return users, groups


# A private mount namespace in which the scratch root's /opt/neuraxis and
# /etc/neuraxis are at their real paths (over copy-on-write overlays of /opt,
# /etc and /var, which gain them and the empty state and cache directories
# the packages lay down). The host's own directories are untouched. Commands run
# there as the units run them: the environments' scripts by their shebangs,
# the configs by their absolute paths.
_AS_INSTALLED = r"""
set -e
root=$1 scratch=$2 etc=$3
shift 3
for dir in opt etc var; do
    mkdir -p "$scratch/upper/$dir" "$scratch/work/$dir"
    mount -t overlay overlay \
        -o "lowerdir=/$dir,upperdir=$scratch/upper/$dir,workdir=$scratch/work/$dir" "/$dir"
done
mkdir -p /opt/neuraxis /etc/neuraxis /var/lib/neuraxis/models /var/cache/neuraxis \
    /var/lib/neuraxis-cortex /var/cache/neuraxis-cortex
mount --bind "$root/opt/neuraxis" /opt/neuraxis
mount --bind "$etc" /etc/neuraxis
exec "$@"
"""


def as_installed(
    root: Path, scratch: Path, command: list[str], etc: Path | None = None
) -> list[str]:
    """`command` run in a namespace where the packages look installed; `etc`:
    another directory to see as /etc/neuraxis (another host's)."""
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        _AS_INSTALLED,
        "as-installed",
        str(root),
        str(scratch),
        str(etc or root / "etc/neuraxis"),
        *command,
    ]


@pytest.fixture
def ray_tmp() -> Iterator[str]:
    """RAY_TMPDIR for a test: short (Ray's socket paths), removed after it."""
    path = tempfile.mkdtemp(prefix="nx-ray-")
    yield path
    kill_processes_mentioning(path)
    shutil.rmtree(path, ignore_errors=True)


def processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if text.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


def kill_processes_mentioning(text: str) -> None:
    for pid in processes_mentioning(text):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
