"""What the tests and the benchmarks share, so that neither imports the other:
processes and ports, the sim gateway and the stacks, external services
(PostgreSQL, Redis, Prometheus, npm packages), fakes (clock, NVML), the SSE
reader, the fault proxy, the sim fleets and the workloads.

Not shipped (pyproject's package list leaves it out); import-linter holds
that tests and bench import harness, never each other, and that harness
imports neither.
"""
