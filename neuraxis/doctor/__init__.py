"""`neuraxis doctor`: checks a host (head, cortex or GPU host) end to end and
says, for each check, what it found and what to do.

One module per area, each a `check(host) -> list[Finding]` over the `Host`
(host.py: the configuration files found, the GPUs NVML reports): gpus,
engine, cluster, network, tls, state. command.py runs them (`add_parser`,
`run`) and report.py prints them.

Everything here imports lazily what a bare GPU host may lack (vLLM, torch,
Ray, FastAPI, cryptography, asyncpg): a missing package is a finding, never a
crash, so that `python -m neuraxis.doctor` runs where only the neuron's
pure-Python settings (pydantic, pydantic-settings) and nvidia-ml-py are.
"""
