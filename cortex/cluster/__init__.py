"""Cluster mode: the deployment spec, placement, the controller and replica
actors, and cortex's side of them. The only package that imports Ray."""

import os

# Ray's C++ failure handler would take SIGTERM before uvicorn's graceful
# shutdown (in-flight streams finish) gets it. Ray reads this when it is
# first imported, so it is set before any module here imports ray.
os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
