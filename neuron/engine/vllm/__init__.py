from neuron.engine.vllm.args import VllmOptions
from neuron.engine.vllm.engine import VllmEngine

__all__ = ["VllmEngine", "VllmOptions"]
