"""The settings of the Files and Batch APIs, apart from their code:
cortex's settings, read by every `neuraxis` command to build its flags,
come without FastAPI."""

from __future__ import annotations

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from axon.settings import SettingsGroup


class FilesSettings(SettingsGroup):
    """Uploaded files (/v1/files): their caps and how long they are kept."""

    max_bytes: PositiveInt = Field(
        200 * 1024 * 1024,
        description="largest file accepted by POST /v1/files (bytes); larger uploads get 413",
    )
    max_lines: PositiveInt = Field(
        50_000, description="most lines (requests) a file for a batch may have; more: 400"
    )
    ttl_days: NonNegativeFloat = Field(
        30.0,
        description="files and batches (their output and error files too) are deleted this "
        "many days after they were created (0: kept forever); purged with the stored "
        "responses, at responses.purge_interval_s",
    )
    chunk_bytes: PositiveInt = Field(
        256 * 1024,
        le=16 * 1024 * 1024,
        description="a file is stored (and read back) in chunks of this size: what an upload "
        "or a download holds in memory at a time",
    )


class BatchSettings(SettingsGroup):
    """How batches run (/v1/batches): lines in flight, leases."""

    max_in_flight: PositiveInt = Field(
        8,
        description="lines of one batch dispatched at a time (each through the normal request "
        "path: caps, the key's limits, admission, routing)",
    )
    max_running: PositiveInt = Field(
        2, description="batches one cortex process (each worker) runs at a time"
    )
    lease_s: PositiveFloat = Field(
        30.0,
        description="a batch whose instance has not renewed its lease for this long (renewed "
        "every third of it) is taken over by any instance sharing the store; lines already "
        "done are not run again",
    )
    poll_s: PositiveFloat = Field(
        1.0, description="how often an idle process looks for a batch to run (s)"
    )
