"""The neuron's vLLM engine (engine.py, VllmEngine; its options in args.py).
Nothing is imported here: vLLM's own processes load cpu_seed.py as a plugin,
and that must not bring in the engine."""
