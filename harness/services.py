"""The external services the tests and benchmarks run for real (PostgreSQL,
Redis, Prometheus) come from Debian's packages, installed when missing: the
one place that calls apt-get. The servers themselves are started in
postgres.py and redis.py; the Prometheus test starts its own.
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def installed(package: str, find: Callable[[], T | None]) -> T:
    """What `find` finds (a binary's path, say), after installing Debian's
    `package` if it found nothing; fails if it still finds nothing."""
    found = find()
    if found is None:
        # The suite's workers (pytest-xdist) may ask at once: one installs,
        # the others wait on the lock and then find it installed.
        with open("/tmp/neuraxis-apt.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            found = find()
            if found is None:
                env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
                subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
                install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package]
                subprocess.run(install, check=True, env=env)
                found = find()
    if found is None:
        raise RuntimeError(f"{package} is not installed and apt-get did not install it")
    return found


def postgres_bin_dir() -> Path:
    """The directory of PostgreSQL's server programs (initdb, pg_ctl)."""

    def find() -> Path | None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        return Path(found[-1]).parent if found else None

    return installed("postgresql", find)


def redis_server_binary() -> str:
    """The path of redis-server."""
    return installed("redis-server", lambda: shutil.which("redis-server"))


def prometheus_binary() -> str:
    """The path of prometheus (promtool comes with it)."""

    def find() -> str | None:
        return shutil.which("prometheus") if shutil.which("promtool") else None

    return installed("prometheus", find)
