"""`neuraxis config check`: parse configuration files the way the services
will, and say what is wrong with each (before a restart finds out), and
which spellings from before the settings were grouped (flat keys in the
file, NEURAXIS_CORTEX_* names in the environment) have a preferred one now:
a warning each, which does not fail the check."""

from __future__ import annotations

from pathlib import Path

from axon.settings import SettingsError, former_spellings, load_settings


def check(
    cortex: Path | None, neuron: Path | None, deployment: Path | None, head: Path | None = None
) -> list[str]:
    """One line per file: '<path>: ok', or the problem ('error: ...'); then
    a 'warning: ...' line per old spelling. Raises nothing."""
    from axon.neuron_settings import NeuronSettings
    from cortex.cluster.spec import SpecError, load_spec
    from cortex.config import CortexSettings

    results: list[str] = []
    if cortex is not None:
        try:
            settings = load_settings(CortexSettings, cortex, {})
            if settings.tls is not None:
                settings.tls.read()  # a missing or unreadable file: TlsError
            results.append(f"{cortex}: ok")
            results += [f"warning: {line}" for line in former_spellings(CortexSettings, cortex)]
            if settings.controller.deployment is not None and deployment is None:
                deployment = settings.controller.deployment
        except SettingsError as e:
            results.append(f"error: {e}")
    if neuron is not None:
        try:
            neuron_settings = load_settings(NeuronSettings, neuron, {})
            if neuron_settings.tls is not None:
                neuron_settings.tls.read()
            results.append(f"{neuron}: ok")
        except SettingsError as e:
            results.append(f"error: {e}")
    if deployment is not None:
        try:
            spec = load_spec(deployment)
            models = ", ".join(f"{m.id}×{m.replicas}" for m in spec.models) or "no models"
            results.append(f"{deployment}: ok ({models})")
        except SpecError as e:
            results.append(f"error: {e}")
    if head is not None:
        from neuraxis.head import HeadSettings

        try:
            load_settings(HeadSettings, head, {})
            results.append(f"{head}: ok")
        except SettingsError as e:
            results.append(f"error: {e}")
    return results
