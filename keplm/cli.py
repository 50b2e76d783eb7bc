"""The ``keplm`` command line: ``keplm build-kg ...`` (see ``keplm <command> --help``)."""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="keplm", description="keplm command-line tools")
    commands = parser.add_subparsers(dest="command", required=True)
    from keplm.commands import build_kg as build

    build.add_arguments(commands.add_parser("build-kg", help="annotate a dataset with KALA knowledge + report"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "build-kg":
        build.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
