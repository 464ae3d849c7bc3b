"""The state: the directories as neuraxis-common's tmpfiles.d lays them out
(owner and mode, which the units' ReadWritePaths expect), cortex's store
reachable (the SQLite file's directory writable, or PostgreSQL answering),
and the deployment spec valid."""

from __future__ import annotations

import asyncio
import grp
import pwd
import stat
from pathlib import Path

from neuraxis.doctor.finding import Finding, Status
from neuraxis.doctor.host import Host, nearest_existing, writable

AREA = "state"
STORE_TIMEOUT_S = 5.0


def check(host: Host) -> list[Finding]:
    findings = directories(host.tmpfiles)
    if host.cortex:
        findings.append(_store(host))
    spec = host.deployment_file or (host.cortex.deployment if host.cortex else None)
    if spec is not None:
        findings.append(_spec(spec))
    return findings


def directories(tmpfiles: Path) -> list[Finding]:
    """Each `d` line of the tmpfiles.d file: the directory there, with its
    owner, group and mode."""
    if not tmpfiles.is_file():
        return [Finding(AREA, "directories", Status.SKIP, f"no {tmpfiles}: not a packaged host")]
    findings = []
    for line in tmpfiles.read_text().splitlines():
        fields = line.split()
        if len(fields) < 5 or fields[0] != "d":
            continue
        path, mode, user, group = Path(fields[1]), int(fields[2], 8), fields[3], fields[4]
        fix = f"systemd-tmpfiles --create {tmpfiles}"
        if not path.is_dir():
            findings.append(Finding(AREA, str(path), Status.FAIL, f"{path} is missing", fix))
            continue
        st = path.stat()
        have = (_user(st.st_uid), _group(st.st_gid), stat.S_IMODE(st.st_mode))
        found = f"{path}: {have[0]}:{have[1]} {have[2]:04o}"
        if have != (user, group, mode):
            findings.append(
                Finding(
                    AREA,
                    str(path),
                    Status.FAIL,
                    f"{found}; the units expect {user}:{group} {mode:04o}",
                    fix,
                )
            )
        else:
            findings.append(Finding(AREA, str(path), Status.OK, found))
    return findings


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _store(host: Host) -> Finding:
    assert host.cortex is not None
    dsn = host.cortex.postgres_dsn
    if dsn:
        return _postgres(dsn)
    directory = host.cortex.state_dir
    # cortex makes a missing state_dir where it may (a development host's).
    existing = nearest_existing(directory)
    if not writable(existing):
        return Finding(
            AREA,
            "store",
            Status.FAIL,
            f"state_dir {directory}: {existing} is not writable by this user",
            "run doctor as cortex's user (sudo -u neuraxis-cortex), "
            f"or chown neuraxis-cortex {directory}",
        )
    return Finding(AREA, "store", Status.OK, f"SQLite in {directory}: writable")


def _postgres(dsn: str) -> Finding:
    try:
        import asyncpg
    except ImportError:
        return Finding(AREA, "store", Status.SKIP, "asyncpg is not installed here")

    async def connect() -> None:
        conn = await asyncpg.connect(dsn, timeout=STORE_TIMEOUT_S)
        await conn.close()

    try:
        asyncio.run(connect())
    except (TimeoutError, OSError, asyncpg.PostgresError) as e:
        return Finding(
            AREA,
            "store",
            Status.FAIL,
            f"PostgreSQL does not take the connection ({e})",
            "check postgres_dsn, the database's pg_hba.conf and that it runs",
        )
    return Finding(AREA, "store", Status.OK, "PostgreSQL connects")


def _spec(path: Path) -> Finding:
    from cortex.cluster.spec import SpecError, load_spec

    try:
        spec = load_spec(path)
    except SpecError as e:
        return Finding(AREA, "deployment", Status.FAIL, str(e), f"fix {path}")
    ids = ", ".join(m.id for m in spec.models)
    return Finding(AREA, "deployment", Status.OK, f"{path}: {len(spec.models)} models ({ids})")
