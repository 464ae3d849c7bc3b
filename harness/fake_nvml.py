"""The one fake NVML, in two forms over the same list of devices (name,
compute capability):

- for real processes (the neuron, the host agent, an installed RPM): a small
  C libnvidia-ml.so.1 that reports the GPUs named in an environment
  variable, so that they run their real NVML path (pynvml loading the
  library) on a machine without NVIDIA GPUs;

      env = fake_nvml_env([("NVIDIA A100-SXM4-80GB", (8, 0))])
      subprocess.run([...], env=env)

- in the test's own process: `FakeNvml`, passed where code takes the pynvml
  module as an argument (neuron.gpu.detect, print_engine_args).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEVICES_ENV = "FAKE_NVML_DEVICES"

_SOURCE = r"""
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

/* FAKE_NVML_DEVICES="name:major.minor:bytes;name:major.minor:bytes" */
#define MAX_DEVICES 16
typedef struct { char name[96]; int major, minor; unsigned long long memory; } device_t;
typedef struct { unsigned long long total, free, used; } memory_t;
static device_t devices[MAX_DEVICES];
static unsigned int count;

static int load(void) {
    const char *spec = getenv("FAKE_NVML_DEVICES");
    count = 0;
    if (!spec) return 0;
    char *copy = strdup(spec), *save = NULL;
    for (char *item = strtok_r(copy, ";", &save); item && count < MAX_DEVICES;
         item = strtok_r(NULL, ";", &save)) {
        char *cap = strchr(item, ':');
        if (!cap) continue;
        *cap++ = 0;
        char *mem = strchr(cap, ':');
        if (mem) *mem++ = 0;
        device_t *d = &devices[count++];
        strncpy(d->name, item, sizeof d->name - 1);
        d->major = atoi(cap);
        char *dot = strchr(cap, '.');
        d->minor = dot ? atoi(dot + 1) : 0;
        d->memory = mem ? strtoull(mem, NULL, 10) : 0;
    }
    free(copy);
    return 0;
}

int nvmlInitWithFlags(unsigned int flags) { (void)flags; return load(); }
int nvmlInit_v2(void) { return load(); }
int nvmlShutdown(void) { return 0; }
/* FAKE_NVML_DRIVER="580.95.05" (that one when unset) */
int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    const char *v = getenv("FAKE_NVML_DRIVER");
    strncpy(version, v ? v : "580.95.05", length);
    version[length - 1] = 0;
    return 0;
}
const char *nvmlErrorString(int result) { (void)result; return "fake NVML error"; }
int nvmlDeviceGetCount_v2(unsigned int *n) { *n = count; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    if (index >= count) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *device = (void *)(uintptr_t)(index + 1);
    return 0;
}
static device_t *of(void *handle) {
    uintptr_t i = (uintptr_t)handle;
    return (i >= 1 && i <= count) ? &devices[i - 1] : NULL;
}
int nvmlDeviceGetName(void *handle, char *name, unsigned int length) {
    device_t *d = of(handle);
    if (!d) return 2;
    strncpy(name, d->name, length);
    name[length - 1] = 0;
    return 0;
}
int nvmlDeviceGetCudaComputeCapability(void *handle, int *major, int *minor) {
    device_t *d = of(handle);
    if (!d) return 2;
    *major = d->major;
    *minor = d->minor;
    return 0;
}
int nvmlDeviceGetMemoryInfo(void *handle, memory_t *memory) {
    device_t *d = of(handle);
    if (!d) return 2;
    memory->total = d->memory;
    memory->free = d->memory;
    memory->used = 0;
    return 0;
}
"""


def fake_nvml_dir() -> Path:
    """A directory holding the compiled libnvidia-ml.so.1 (built once)."""
    digest = hashlib.sha256(_SOURCE.encode()).hexdigest()[:16]
    out = Path(tempfile.gettempdir()) / f"neuraxis-fake-nvml-{digest}"
    lib = out / "libnvidia-ml.so.1"
    if not lib.exists():
        out.mkdir(parents=True, exist_ok=True)
        src = out / "fake_nvml.c"
        src.write_text(_SOURCE)
        tmp = out / f"lib.{os.getpid()}.so"
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-O1", "-o", str(tmp), str(src)],
            check=True,
            capture_output=True,
        )
        tmp.replace(lib)
    return out


def fake_nvml_env(
    devices: list[tuple[str, tuple[int, int]]],
    base: dict[str, str] | None = None,
    memory_bytes: int = 80 * 1024**3,
) -> dict[str, str]:
    """An environment in which NVML reports `devices` (name, compute capability)."""
    env = dict(os.environ if base is None else base)
    env["LD_LIBRARY_PATH"] = ":".join(
        p for p in (str(fake_nvml_dir()), env.get("LD_LIBRARY_PATH", "")) if p
    )
    env[DEVICES_ENV] = ";".join(
        f"{name}:{major}.{minor}:{memory_bytes}" for name, (major, minor) in devices
    )
    return env


@dataclass
class FakeNvml:
    """Stands in for the pynvml module: the calls neuron.gpu.detect makes, on
    `devices`; records the calls that open and close NVML."""

    devices: list[tuple[str, tuple[int, int]]]
    fail_init: bool = False  # as without a driver: NVML cannot load
    memory_bytes: int = 80 * 1024**3
    calls: list[str] = field(default_factory=list)

    @property
    def shut_down(self) -> bool:
        return "shutdown" in self.calls

    def nvmlInit(self) -> None:  # noqa: N802 (NVML's names)
        self.calls.append("init")
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:  # noqa: N802
        return self.devices[handle][0].encode()

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:  # noqa: N802
        return self.devices[handle][1]

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:  # noqa: N802
        return type("Memory", (), {"total": self.memory_bytes})()
