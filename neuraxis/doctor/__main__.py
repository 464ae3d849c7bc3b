"""`python -m neuraxis.doctor`: doctor without the rest of the `neuraxis`
command, for a host that has only the neuron's settings and NVML."""

from __future__ import annotations

import argparse
import sys

from neuraxis.commands.doctor import DOCTOR, configure, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="neuraxis doctor", description=DOCTOR.description)
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
