"""Models from the Hugging Face hub: a repo's files in the host's hub cache.

vLLM downloads a repo id's files into the hub cache itself (HF_HUB_CACHE, by
default $HF_HOME/hub) and loads them from there. What neuraxis adds:
- `locate`: a repo's snapshot found in the cache without the network, so that
  a neuron in offline mode (HF_HUB_OFFLINE=1, as hosts run after the first
  pull) refuses at start with what to do, not with vLLM's traceback;
- `pull`: the files fetched ahead of time (`neuraxis model pull`).

Only this module imports huggingface_hub (the engine's packages carry it; a
cortex-only host has none). Its errors become `HubError`, one line for a
person. The cache and offline mode are huggingface_hub's own settings, read
as vLLM's loader reads them, so the check and the engine agree.
"""

from __future__ import annotations

from pathlib import Path

import httpx2
from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import (
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from neuron.models.source import HubModel


class HubError(Exception):
    """A repo's files could not be found or fetched; the message says why
    and what to do."""


def hub_cache() -> Path:
    """The hub cache vLLM reads on this host (HF_HUB_CACHE, else $HF_HOME/hub)."""
    return Path(constants.HF_HUB_CACHE)


def offline_mode() -> bool:
    """Whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) forbids the hub."""
    return constants.is_offline_mode()


def locate(model: HubModel, cache_dir: Path) -> Path:
    """The model's snapshot directory in `cache_dir`, looked up on disk only
    (the neuron's check in offline mode); HubError, saying what to do, when
    it is not there (or is known to be incomplete)."""
    try:
        found = snapshot_download(
            model.repo_id, revision=model.revision, cache_dir=cache_dir, local_files_only=True
        )
    except LocalEntryNotFoundError:
        raise HubError(
            f"{model} is not (or not wholly) in the model cache {cache_dir}, and offline mode "
            f"is on (HF_HUB_OFFLINE=1): fetch it first with `{model.pull_command(cache_dir)}` "
            "as the neuron's user, or unset HF_HUB_OFFLINE"
        ) from None
    return Path(str(found))


def pull(model: HubModel, cache_dir: Path) -> Path:
    """Fetch the model's files into `cache_dir` (those already there are
    kept) and return its snapshot directory; HubError with the reason."""
    try:
        found = snapshot_download(model.repo_id, revision=model.revision, cache_dir=cache_dir)
    except LocalEntryNotFoundError as e:
        # Not in the cache, and the hub could not say what is there: the
        # cause says why (offline mode, no connection, an error answered).
        raise HubError(_not_fetched(model, cache_dir, e.__cause__)) from None
    except RevisionNotFoundError:
        raise HubError(f"{model.repo_id} has no revision '{model.revision}'") from None
    except RepositoryNotFoundError:
        raise HubError(
            f"no repository {model.repo_id} on the hub at {constants.ENDPOINT}, or it is "
            "private or gated: HF_TOKEN (or `hf auth login`) gives the token that may read it"
        ) from None
    except (HfHubHTTPError, httpx2.HTTPError) as e:
        raise HubError(_not_fetched(model, cache_dir, e)) from None
    except OSError as e:
        raise HubError(f"cannot write the model cache {cache_dir}: {e}") from None
    return Path(str(found))


def _not_fetched(model: HubModel, cache_dir: Path, cause: BaseException | None) -> str:
    if isinstance(cause, OfflineModeIsEnabled):
        return (
            f"{model} is not in the model cache {cache_dir}, and offline mode is on "
            "(HF_HUB_OFFLINE=1): unset it for the pull"
        )
    # One line: the library's messages carry advice on further lines.
    reason = f" ({type(cause).__name__}: {' '.join(str(cause).split())})" if cause else ""
    if isinstance(cause, HfHubHTTPError):
        problem = f"the Hugging Face hub at {constants.ENDPOINT} answered an error{reason}"
    else:
        problem = f"the Hugging Face hub at {constants.ENDPOINT} could not be reached{reason}"
    return (
        f"{problem}, and {model} is not (or not wholly) in the model cache {cache_dir}: "
        "HF_ENDPOINT sets the hub's address (a mirror), HTTPS_PROXY a proxy, HF_TOKEN the token"
    )
