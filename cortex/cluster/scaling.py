"""The controller's autoscaling bookkeeping: each autoscaled model's
`ScaleState` (autoscale.py decides; this keeps and steps them), the
decisions counted for the metrics, the models' measured load times, and
the view of it all that answers each cortex report.

Nothing is saved: a new controller follows each model from the replicas it
adopted (`follow`), so that a restart neither forgets a scale-up in
progress nor counts a replica twice.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable

from cortex.cluster import autoscale
from cortex.cluster.autoscale import ScaleState
from cortex.cluster.decisions import ReplicaRecord
from cortex.cluster.spec import DeploymentSpec, ModelSpec
from cortex.cluster.status import CortexReport, ScalingView

log = logging.getLogger("neuraxis.controller")


class Scaling:
    def __init__(self) -> None:
        self.states: dict[str, ScaleState] = {}
        self._decisions: Counter[str] = Counter()
        # Seconds each model's last replica took from placement to SERVING.
        self._load_s: dict[str, float] = {}

    def desired(self, model: ModelSpec) -> int:
        """The replica count `model` is kept at now."""
        state = self.states.get(model.id)
        return model.replicas if state is None else state.desired

    def follow(self, spec: DeploymentSpec, running: Callable[[str], int]) -> None:
        """Start following each new autoscaled model of `spec` from the
        replicas it has (`running(model_id)`), forget the others."""
        for model in spec.models:
            if model.autoscale is None:
                self.states.pop(model.id, None)
            elif model.id not in self.states:
                start = autoscale.initial_state(model.autoscale, model.replicas, running(model.id))
                self.states[model.id] = start
        for model_id in set(self.states) - {m.id for m in spec.models}:
            del self.states[model_id]

    def step(
        self,
        spec: DeploymentSpec,
        replicas: Iterable[ReplicaRecord],
        reports: list[tuple[CortexReport, float]],
        now: float,
    ) -> None:
        """One step of every autoscaled model's desired count at `now`."""
        records = list(replicas)
        for model in spec.models:
            state = self.states.get(model.id)
            if model.autoscale is None or state is None:
                continue
            seen = autoscale.signals(model.id, records, reports, now)
            after = autoscale.step(model.autoscale, state, seen, now)
            self.states[model.id] = after
            last = after.last
            if last is not None and last is not state.last:
                self._decisions[f"{model.id}/{last.direction.value}/{last.reason.value}"] += 1
                log.info(
                    "autoscaling %s: %d -> %d replicas (%s: %s)",
                    model.id,
                    last.previous,
                    last.desired,
                    last.reason.value,
                    last.detail,
                )

    def wakes(self, report: CortexReport) -> bool:
        """Whether `report` has requests waiting for a model at zero."""
        return any(
            queued and model in self.states and self.states[model].desired == 0
            for model, queued in report.queued.items()
        )

    def loaded(self, model_id: str, seconds: float) -> None:
        """A replica of the model took `seconds` from placement to SERVING."""
        self._load_s[model_id] = round(seconds, 3)

    def view(self) -> ScalingView:
        return ScalingView(
            desired={model: state.desired for model, state in self.states.items()},
            decisions=dict(self._decisions),
            load_s=dict(self._load_s),
        )
