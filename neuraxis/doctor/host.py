"""What doctor knows about the host before any check: the configuration
files it found (cortex.toml, neuron.toml, head.toml under the config
directory, or the ones named), the settings in them as the services would
read them, and the GPUs NVML reports (detected once, shared by the areas).

A host with none of the files is a development host (`neuraxis up`): the
checks then use the settings' defaults.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from axon.generations import Generation, UnsupportedGpuError
from axon.neuron_settings import NeuronSettings
from axon.settings import S, SettingsError, load_settings
from axon.tls import TlsFiles
from neuraxis.doctor.finding import Finding, Status

CONFIG_DIR = Path("/etc/neuraxis")
# The layout neuraxis-common's tmpfiles.d gives the state directories.
TMPFILES = Path("/usr/lib/tmpfiles.d/neuraxis.conf")
TOKEN_FILE = "ray-auth-token"


@dataclass(frozen=True)
class CortexView:
    """The cortex settings doctor reads (one place to follow their names)."""

    host: str
    port: int
    admin_host: str
    admin_port: int
    ray_address: str | None
    ray_head: bool
    deployment: Path | None
    state_dir: Path
    postgres_dsn: str | None
    tls: TlsFiles | None


@dataclass(frozen=True)
class HeadView:
    ray_node_ip: str
    ray_port: int


@dataclass(frozen=True)
class GpuScan:
    """NVML's answer: the devices, or why there are none to read."""

    nvml: Any | None
    devices: list[Any] = field(default_factory=list)
    # Set when NVML reported something the neuron refuses (an unknown
    # compute capability).
    error: str | None = None

    @property
    def generation(self) -> Generation | None:
        """The host's one generation; None when mixed or unreadable."""
        from neuron.gpu import host_generation

        if self.error:
            return None
        try:
            return host_generation(self.devices)
        except UnsupportedGpuError:
            return None


@dataclass
class Host:
    config_dir: Path = CONFIG_DIR
    cortex_file: Path | None = None
    neuron_file: Path | None = None
    head_file: Path | None = None
    deployment_file: Path | None = None
    cortex_url: str | None = None
    tmpfiles: Path = TMPFILES
    # Problems reading the files, reported under "config".
    problems: list[Finding] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in ("cortex", "neuron", "head"):
            attr = f"{name}_file"
            if getattr(self, attr) is None and (self.config_dir / f"{name}.toml").is_file():
                setattr(self, attr, self.config_dir / f"{name}.toml")

    @property
    def configured(self) -> bool:
        return any((self.cortex_file, self.neuron_file, self.head_file))

    @cached_property
    def neuron(self) -> NeuronSettings | None:
        """neuron.toml's settings; the defaults on a development host."""
        if self.neuron_file is None:
            return None if self.configured else NeuronSettings()
        return self._load("neuron", self.neuron_file, NeuronSettings)

    @cached_property
    def cortex(self) -> CortexView | None:
        if self.cortex_file is None and self.configured:
            return None
        try:  # cortex's settings import cortex, absent from a GPU host
            from cortex.config import CortexSettings
        except ImportError as e:
            if self.cortex_file is not None:
                self._problem("cortex", self.cortex_file, f"cortex is not installed here ({e})")
            return None
        settings = self._load("cortex", self.cortex_file, CortexSettings)
        if settings is None:
            return None
        return CortexView(
            host=settings.host,
            port=settings.port,
            admin_host=settings.admin.host,
            admin_port=settings.admin.port,
            ray_address=settings.ray.address,
            ray_head=settings.ray.head,
            deployment=settings.controller.deployment,
            state_dir=settings.store.state_dir,
            postgres_dsn=settings.store.postgres_dsn,
            tls=settings.tls,
        )

    @cached_property
    def head(self) -> HeadView | None:
        if self.head_file is None:
            return None
        try:
            from neuraxis.head import HeadSettings
        except ImportError as e:
            self._problem("head", self.head_file, f"the head is not installed here ({e})")
            return None
        settings = self._load("head", self.head_file, HeadSettings)
        if settings is None:
            return None
        return HeadView(ray_node_ip=settings.ray_node_ip, ray_port=settings.ray_port)

    @property
    def is_neuron_host(self) -> bool:
        return self.neuron is not None

    @property
    def ray_address(self) -> str | None:
        """The Ray head this host's services join (or are)."""
        if self.cortex and self.cortex.ray_address:
            return self.cortex.ray_address
        if self.neuron_file is not None and self.neuron and self.neuron.ray_address:
            return self.neuron.ray_address
        if self.head:
            return f"{self.head.ray_node_ip}:{self.head.ray_port}"
        return None

    @property
    def token_path(self) -> Path:
        # The units point Ray there (RAY_AUTH_TOKEN_PATH); so does a shell
        # that exports the same.
        env = os.environ.get("RAY_AUTH_TOKEN_PATH")
        return Path(env) if env else self.config_dir / TOKEN_FILE

    @cached_property
    def gpus(self) -> GpuScan:
        from neuron.gpu import detect, load_nvml

        nvml = load_nvml()
        try:
            return GpuScan(nvml, detect(nvml))
        except UnsupportedGpuError as e:
            return GpuScan(nvml, error=str(e))

    def _load(self, name: str, path: Path | None, cls: type[S]) -> S | None:

        try:
            return load_settings(cls, path, {})
        except SettingsError as e:
            self._problem(name, path, str(e))
            return None

    def _problem(self, name: str, path: Path | None, message: str) -> None:
        self.problems.append(
            Finding(
                "config",
                name,
                Status.FAIL,
                f"{path or f'{name} settings'}: {message}",
                f"fix it (`neuraxis config check --{name} {path}` says the same)",
            )
        )


def describe_path(path: Path) -> str:
    """`path (mode 0640, root:neuraxis)`."""
    import grp
    import pwd

    st = path.stat()
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{path} (mode {st.st_mode & 0o7777:04o}, {owner}:{group})"


def nearest_existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists: where a service that
    makes its missing directory would make it."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def writable(directory: Path) -> bool:
    """Whether this process can create a file in `directory` (os.access says
    nothing of read-only mounts)."""
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".doctor-"):
            return True
    except OSError:
        return False
