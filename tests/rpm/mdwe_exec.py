"""Run a command under systemd's MemoryDenyWriteExecute=yes, as systemd 252
(RHEL 9) applies it: a seccomp filter refusing (EPERM) mmap with both
PROT_WRITE and PROT_EXEC, mprotect and pkey_mprotect with PROT_EXEC, and shmat
with SHM_EXEC (systemd's seccomp_memory_deny_write_execute). Inherited by every
child, across exec.

    /usr/bin/python3 tests/rpm/mdwe_exec.py COMMAND [ARG...]

Runs on Debian's Python with its python3-seccomp (libseccomp's binding); the
RPM tests run the installed cortex through it.
"""

import errno
import os
import sys

import seccomp  # type: ignore[import-not-found]

PROT_WRITE, PROT_EXEC = 0x2, 0x4
SHM_EXEC = 0o100000


def main() -> None:
    refuse = seccomp.ERRNO(errno.EPERM)
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    wx = PROT_WRITE | PROT_EXEC
    f.add_rule(refuse, "mmap", seccomp.Arg(2, seccomp.MASKED_EQ, wx, wx))
    f.add_rule(refuse, "mprotect", seccomp.Arg(2, seccomp.MASKED_EQ, PROT_EXEC, PROT_EXEC))
    f.add_rule(refuse, "pkey_mprotect", seccomp.Arg(2, seccomp.MASKED_EQ, PROT_EXEC, PROT_EXEC))
    f.add_rule(refuse, "shmat", seccomp.Arg(2, seccomp.MASKED_EQ, SHM_EXEC, SHM_EXEC))
    f.load()
    os.execv(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
