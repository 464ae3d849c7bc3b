"""`neuraxis config check`: parse configuration files the way the services
will, and say what is wrong with each (before a restart finds out), and
which spellings from before the settings were grouped (flat keys in the
file, NEURAXIS_CORTEX_* names in the environment) have a preferred one now:
a warning each, which does not fail the check."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from axon.settings import SettingsError, former_spellings, load_settings
from neuron.models.bundled import BUNDLED_MODELS
from neuron.models.source import SourceKind, misplaced_revision, source_kind, unknown_source

if TYPE_CHECKING:
    from axon.neuron_settings import NeuronSettings
    from cortex.cluster.spec import DeploymentSpec, ModelSpec


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
            results.append(_neuron_problem(neuron, neuron_settings) or f"{neuron}: ok")
        except SettingsError as e:
            results.append(f"error: {e}")
    if deployment is not None:
        try:
            spec = load_spec(deployment)
            models = ", ".join(_count(m) for m in spec.models) or "no models"
            problems = _source_problems(deployment, spec)
            results += problems or [f"{deployment}: ok ({models})"]
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


def _source_problems(path: Path, spec: DeploymentSpec) -> list[str]:
    """An error line for each model whose source (or revision) no neuron
    could load: refused here rather than by every replica at start. The
    simulated engine loads nothing."""
    from cortex.cluster.spec import line_of

    text = path.read_text()
    lines = []
    for index, model in enumerate(spec.models):
        problem = _model_problem(model.engine.kind, model.source, model.revision, "source")
        if problem is not None:
            key, message = problem
            line = line_of(text, ("models", index, key))
            at = f" line {line}" if line else ""
            lines.append(f"error: {path}:{at}: models.{index}.{key}: {message}")
    return lines


def _neuron_problem(path: Path, settings: NeuronSettings) -> str | None:
    problem = _model_problem(settings.engine, settings.model, settings.revision, "model")
    return f"error: {path}: {problem[0]}: {problem[1]}" if problem else None


def _model_problem(
    engine: str, source: str, revision: str | None, source_key: str
) -> tuple[str, str] | None:
    """(the key at fault, why) for a model the vLLM engine could not load;
    `source_key` is what the file calls the source."""
    if engine != "vllm":
        return None
    kind = source_kind(source, BUNDLED_MODELS)
    if kind is None:
        return source_key, unknown_source(source, BUNDLED_MODELS)
    if revision is not None and kind is not SourceKind.REPO:
        return "revision", misplaced_revision(source, revision)
    return None


def _count(model: ModelSpec) -> str:
    """A model and its replicas: fixed (×2) or autoscaled (×0..4)."""
    scale = model.autoscale
    if scale is None:
        return f"{model.id}×{model.replicas}"
    return f"{model.id}×{scale.min_replicas}..{scale.max_replicas}"
