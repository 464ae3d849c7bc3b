"""The `neuraxis` commands, one module each: `add_parser(subparsers)` adds
the command's parser, `run(args) -> int` runs it and returns the exit
status. neuraxis/cli.py registers them; shared.py holds what several of
them declare or do alike; what a command does beyond its options and exit
status lives in the modules beside this package."""
