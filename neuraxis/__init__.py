"""The top layer: the neuraxis command line, `neuraxis up`, status and config
check. It may import cortex and neuron; nothing imports it."""
