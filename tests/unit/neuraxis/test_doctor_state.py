"""doctor's state checks: the directories against a tmpfiles.d file, the
SQLite store's directory, the deployment spec."""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

from neuraxis.doctor.finding import Finding, Status
from neuraxis.doctor.host import Host
from neuraxis.doctor.state import check, directories

USER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


def by_check(findings: list[Finding]) -> dict[str, Finding]:
    return {f.check: f for f in findings}


def test_directories_as_tmpfiles_lays_them_out(tmp_path: Path) -> None:
    right, wrong, missing = tmp_path / "lib", tmp_path / "cache", tmp_path / "run"
    right.mkdir(mode=0o750)
    right.chmod(0o750)
    wrong.mkdir()
    wrong.chmod(0o755)
    tmpfiles = tmp_path / "neuraxis.conf"
    tmpfiles.write_text(
        "#Type Path Mode User Group Age\n"
        + "".join(f"d {p} 0750 {USER} {GROUP} -\n" for p in (right, wrong, missing))
        + "m neuraxis video\n"
    )
    found = by_check(directories(tmpfiles))
    assert found[str(right)].status is Status.OK
    assert found[str(wrong)].status is Status.FAIL
    assert found[str(wrong)].found == (
        f"{wrong}: {USER}:{GROUP} 0755; the units expect {USER}:{GROUP} 0750"
    )
    assert found[str(wrong)].advice == f"systemd-tmpfiles --create {tmpfiles}"
    assert found[str(missing)].found == f"{missing} is missing"
    assert directories(tmp_path / "absent.conf")[0].status is Status.SKIP


def test_the_store_and_the_deployment_spec(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    spec = tmp_path / "deployment.toml"
    spec.write_text(
        '[[models]]\nid = "chat"\nsource = "smollm2-135m-instruct"\ngenerations = ["cpu"]\n'
    )
    (tmp_path / "cortex.toml").write_text(
        f'state_dir = "{state}"\nray_address = "127.0.0.1:1"\ndeployment = "{spec}"\n'
    )
    host = Host(config_dir=tmp_path, tmpfiles=tmp_path / "none.conf")
    found = by_check(check(host))
    assert found["store"].found == f"SQLite in {state}: writable"
    assert found["deployment"].status is Status.OK, found["deployment"]
    spec.write_text('[[models]]\nid = "chat"\nreplicas = "many"\n')
    found = by_check(check(Host(config_dir=tmp_path, tmpfiles=tmp_path / "none.conf")))
    assert found["deployment"].status is Status.FAIL
    assert found["deployment"].advice == f"fix {spec}"
