from neuron.engine.vllm.engine import VllmEngine, VllmOptions

__all__ = ["VllmEngine", "VllmOptions"]
