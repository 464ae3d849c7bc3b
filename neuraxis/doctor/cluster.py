"""The cluster: the Ray head answering at the configured address, the Ray
token file (present, not empty, readable by the services and no one else)
and the labels this node joins with, as the controller places on them."""

from __future__ import annotations

import grp
import os
import pwd
import socket
import stat

from axon.generations import GENERATION_LABEL
from neuraxis.doctor.finding import Finding, Status
from neuraxis.doctor.host import Host, describe_path

AREA = "cluster"
CONNECT_TIMEOUT_S = 3.0


def check(host: Host) -> list[Finding]:
    address = host.ray_address
    if address is None:
        return [Finding(AREA, "ray", Status.SKIP, "no ray_address configured: not a cluster host")]
    return [_head(address), _token(host), *_labels(host)]


def _head(address: str) -> Finding:
    hostname, _, port = address.rpartition(":")
    try:
        with socket.create_connection((hostname, int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except (OSError, ValueError) as e:
        return Finding(
            AREA,
            "head",
            Status.FAIL,
            f"the Ray head at {address} does not answer ({e})",
            "start it on the head host (systemctl start neuraxis-head) and open the "
            "neuraxis-ray firewalld service between the cluster's hosts",
        )
    return Finding(AREA, "head", Status.OK, f"the Ray head at {address} answers")


def _token(host: Host) -> Finding:
    path = host.token_path
    copy = (
        f"copy {path} from the head host (made when neuraxis-cortex is installed): "
        f"install -m 0640 -o root -g neuraxis TOKEN {path}"
    )
    if not path.is_file():
        return Finding(AREA, "token", Status.FAIL, f"{path} is missing: Ray refuses the node", copy)
    st = path.stat()
    found = describe_path(path)
    if st.st_mode & stat.S_IRWXO:
        return Finding(
            AREA,
            "token",
            Status.FAIL,
            f"{found}: anyone on this host can read the cluster's token",
            f"chmod 0640 {path}",
        )
    if st.st_size == 0:
        return Finding(AREA, "token", Status.FAIL, f"{found} is empty", copy)
    if not _service_user_reads(st):
        return Finding(
            AREA,
            "token",
            Status.FAIL,
            f"{found}: the services' user (neuraxis) cannot read it",
            f"chown root:neuraxis {path}; chmod 0640 {path}",
        )
    return Finding(AREA, "token", Status.OK, found)


def _labels(host: Host) -> list[Finding]:
    if host.neuron_file is None:
        return []
    generation = host.gpus.generation
    if generation is None:
        return [
            Finding(
                AREA,
                "labels",
                Status.FAIL,
                "no one generation to label this node with (see gpus)",
                "fix the gpus findings first",
            )
        ]
    count = len(host.gpus.devices)
    return [
        Finding(
            AREA,
            "labels",
            Status.OK,
            f"this node joins with {GENERATION_LABEL}={generation.value} and {count} GPUs: "
            f'models with generations including "{generation.value}" can be placed here',
        )
    ]


def _service_user_reads(st: os.stat_result) -> bool:
    """Whether the neuraxis user reads a file (True where there is no such
    user: not a packaged host)."""
    try:
        user = pwd.getpwnam("neuraxis")
    except KeyError:
        return True
    if st.st_uid == user.pw_uid:
        return bool(st.st_mode & stat.S_IRUSR)
    try:
        members = grp.getgrgid(st.st_gid).gr_mem
    except KeyError:
        members = []
    in_group = st.st_gid == user.pw_gid or user.pw_name in members
    return in_group and bool(st.st_mode & stat.S_IRGRP)
