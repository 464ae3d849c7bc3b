"""The bottom layer: what cortex and neuron both use (errors, settings, logs,
process helpers, the gRPC stubs and the cluster vocabulary). Imports nothing
of cortex, neuron or neuraxis."""
