"""The network: the configured ports free or held by our own services, the
firewalld zones holding the packaged services, and cortex answering from
this host where a cortex address is given (--cortex-url)."""

from __future__ import annotations

import errno
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from neuraxis.doctor.finding import Finding, Status
from neuraxis.doctor.host import Host

AREA = "network"
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Port:
    setting: str  # where it is configured: "cortex.toml port"
    host: str
    port: int


def ports(host: Host) -> list[Port]:
    """The ports this host's services listen on, as configured."""
    found: list[Port] = []
    where = {
        "cortex": host.cortex_file.name if host.cortex_file else "cortex's default",
        "neuron": host.neuron_file.name if host.neuron_file else "the neuron's default",
    }
    if host.cortex:
        found.append(Port(f"{where['cortex']} port", host.cortex.host, host.cortex.port))
        found.append(
            Port(f"{where['cortex']} admin_port", host.cortex.admin_host, host.cortex.admin_port)
        )
    if host.head:
        found.append(Port("head.toml ray_port", host.head.ray_node_ip, host.head.ray_port))
    # The agent itself listens on no neuron port: its replicas do, on ports
    # the controller picks (the ranges of the neuraxis-neuron firewalld service).
    if host.neuron and host.neuron_file is None:
        found.append(Port(f"{where['neuron']} port", host.neuron.host, host.neuron.port))
        if host.neuron.metrics_port:
            found.append(
                Port(f"{where['neuron']} metrics_port", "0.0.0.0", host.neuron.metrics_port)
            )
    return [p for p in found if p.port]


def check(host: Host) -> list[Finding]:
    findings = [_port(p) for p in ports(host)]
    findings.append(_firewalld(host))
    if host.cortex_url:
        findings.append(_cortex(host.cortex_url))
    return findings


def _port(port: Port) -> Finding:
    name = f"port {port.port}"
    where = f"{port.host}:{port.port} ({port.setting})"
    with socket.socket(socket.AF_INET6 if ":" in port.host else socket.AF_INET) as s:
        # As the services bind: a port left in TIME_WAIT is free to them.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((port.host, port.port))
        except OSError as e:
            if e.errno == errno.EADDRNOTAVAIL:
                return Finding(
                    AREA,
                    name,
                    Status.FAIL,
                    f"{where}: {port.host} is not an address of this host",
                    f"set {port.setting.split()[-1]} to one of this host's addresses",
                )
            if e.errno != errno.EADDRINUSE:
                return Finding(AREA, name, Status.FAIL, f"{where}: {e}")
        else:
            return Finding(AREA, name, Status.OK, f"{where}: free")
    holder = holder_of(port.port)
    if holder and is_ours(holder[1]):
        return Finding(
            AREA,
            name,
            Status.OK,
            f"{where}: held by our own service (pid {holder[0]}: {holder[1]})",
        )
    who = f"pid {holder[0]}: {holder[1]}" if holder else "a process doctor cannot see (run as root)"
    return Finding(
        AREA,
        name,
        Status.FAIL,
        f"{where}: taken by {who}",
        f"stop that process, or set {port.setting.split()[-1]} to a free port",
    )


# Our services' commands: the `neuraxis` command (packaged or a venv's), its
# modules run with -m, and Ray's processes (the head's GCS, raylets, the replicas'
# actors).
OUR_COMMANDS = frozenset({"neuraxis", "gcs_server", "raylet"})
OUR_MODULES = frozenset({"neuraxis.cli", "neuraxis.doctor", "cortex.main", "neuron.main"})


# The interpreter's options that take a value (-W ignore, -X dev).
_VALUE_OPTIONS = frozenset({"-W", "-X"})


def is_ours(cmdline: str) -> bool:
    """Whether the program a command line runs is one of ours. Only the
    program counts (an interpreter's script or -m module): an argument that
    merely names a neuraxis path, such as `pytest tests/unit/neuraxis`, does not."""
    args = cmdline.split()
    if not args:
        return False
    if args[0].startswith("ray::"):
        return True
    if not Path(args[0]).name.startswith("python"):
        return Path(args[0]).name in OUR_COMMANDS
    # The interpreter's options come before what it runs: a -m module, -c
    # code or a script.
    rest = iter(args[1:])
    for arg in rest:
        if arg == "-m":
            return next(rest, "") in OUR_MODULES
        if arg == "-c":
            return False
        if arg in _VALUE_OPTIONS:
            next(rest, None)
        elif not arg.startswith("-"):
            return Path(arg).name in OUR_COMMANDS
    return False


def holder_of(port: int) -> tuple[int, str] | None:
    """The process listening on a TCP port (pid, command line), from /proc;
    None where it is another user's and this one is not root."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local address "0100007F:1F90", state 0A = LISTEN
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                inodes.add(fields[9])
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                target = fd.readlink().name
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
                    return int(proc.name), cmdline.decode(errors="replace").strip()[:200]
        except OSError:
            continue
    return None


# The firewalld services neuraxis-common installs, by what the host runs.
def _services(host: Host) -> list[str]:
    wanted = []
    if host.cortex:
        wanted.append("neuraxis-cortex")
    if host.ray_address:
        wanted.append("neuraxis-ray")
    if host.neuron_file:
        wanted.append("neuraxis-neuron")
    return wanted


def _firewalld(host: Host) -> Finding:
    wanted = _services(host) if host.configured else []
    if not wanted:
        return Finding(AREA, "firewalld", Status.SKIP, "no packaged service configured here")
    cmd = shutil.which("firewall-cmd")
    if cmd is None:
        return Finding(AREA, "firewalld", Status.SKIP, "firewalld is not installed")
    state = subprocess.run([cmd, "--state"], capture_output=True, text=True, timeout=TIMEOUT_S)
    if state.returncode != 0:
        return Finding(AREA, "firewalld", Status.SKIP, "firewalld is not running")
    zones = subprocess.run(
        [cmd, "--get-active-zones"], capture_output=True, text=True, timeout=TIMEOUT_S
    ).stdout
    held: dict[str, str] = {}
    for zone in [line for line in zones.splitlines() if line and not line[0].isspace()]:
        services = subprocess.run(
            [cmd, f"--zone={zone}", "--list-services"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        ).stdout.split()
        for service in services:
            held.setdefault(service, zone)
    missing = [s for s in wanted if s not in held]
    found = ", ".join(f"{s} in zone {held[s]}" for s in wanted if s in held)
    if missing:
        return Finding(
            AREA,
            "firewalld",
            Status.FAIL,
            f"no active zone holds {', '.join(missing)}" + (f" ({found})" if found else ""),
            "; ".join(f"firewall-cmd --permanent --zone=ZONE --add-service={s}" for s in missing)
            + "; firewall-cmd --reload (ZONE: one limited to the cluster's hosts, "
            "docs/deploy.md)",
        )
    return Finding(AREA, "firewalld", Status.OK, found)


def _cortex(url: str) -> Finding:
    target = url.rstrip("/") + "/healthz"
    try:
        with urllib.request.urlopen(target, timeout=TIMEOUT_S) as response:
            status = response.status
    except urllib.error.HTTPError as e:
        status = e.code
    except (OSError, ValueError) as e:
        return Finding(
            AREA,
            "cortex",
            Status.FAIL,
            f"{target} does not answer ({e})",
            "check that neuraxis-cortex runs there and that neuraxis-cortex's port is open "
            "to this host",
        )
    if status != 200:
        return Finding(AREA, "cortex", Status.FAIL, f"{target} answers {status}")
    return Finding(AREA, "cortex", Status.OK, f"{target} answers 200")
