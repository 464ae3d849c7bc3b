"""The enums the gRPC contract carries, mapped to and from their Python
counterparts in one place (the neuron writes them, cortex reads them)."""

from __future__ import annotations

from axon.generations import Generation
from axon.priority import DEFAULT_CLASS, PriorityClass
from axon.tasks import ModelTask
from axon.v1 import neuron_pb2 as pb

GENERATION_TO_PB: dict[Generation, pb.GpuGeneration] = {
    Generation.CPU: pb.GPU_GENERATION_CPU,
    Generation.AMPERE: pb.GPU_GENERATION_AMPERE,
    Generation.ADA: pb.GPU_GENERATION_ADA,
    Generation.HOPPER: pb.GPU_GENERATION_HOPPER,
    Generation.BLACKWELL: pb.GPU_GENERATION_BLACKWELL,
}
PB_TO_GENERATION: dict[pb.GpuGeneration, Generation] = {v: k for k, v in GENERATION_TO_PB.items()}

TASK_TO_PB: dict[ModelTask, pb.ModelTask] = {
    ModelTask.GENERATE: pb.MODEL_TASK_GENERATE,
    ModelTask.EMBED: pb.MODEL_TASK_EMBED,
}
PB_TO_TASK: dict[pb.ModelTask, ModelTask] = {v: k for k, v in TASK_TO_PB.items()}


def generation_name(value: pb.GpuGeneration) -> str:
    """The generation's name for labels and status, `unknown` for a value
    this build does not know (a newer neuron)."""
    generation = PB_TO_GENERATION.get(value)
    return generation.value if generation else "unknown"


CLASS_TO_PB: dict[PriorityClass, pb.PriorityClass] = {
    "interactive": pb.PRIORITY_CLASS_INTERACTIVE,
    "default": pb.PRIORITY_CLASS_DEFAULT,
    "batch": pb.PRIORITY_CLASS_BATCH,
}
# UNSPECIFIED (a request that names no class) is the default class.
PB_TO_CLASS: dict[pb.PriorityClass, PriorityClass] = {
    pb.PRIORITY_CLASS_UNSPECIFIED: DEFAULT_CLASS,
    **{v: k for k, v in CLASS_TO_PB.items()},
}
