"""The ``keplm`` command line: ``keplm build-kg ...``, ``keplm train-kge ...``, ``keplm check-knowledge ...`` (see
``keplm <command> --help``)."""

from __future__ import annotations

import argparse
import logging
import sys


def build_parser() -> argparse.ArgumentParser:
    """The ``keplm`` parser with its sub-commands."""
    parser = argparse.ArgumentParser(prog="keplm", description="keplm command-line tools")
    commands = parser.add_subparsers(dest="command", required=True)
    from keplm.commands import build_kg as build
    from keplm.commands import check_knowledge, train_kge

    shown = {"formatter_class": argparse.ArgumentDefaultsHelpFormatter}  # every option's default in --help
    build.add_arguments(commands.add_parser("build-kg", help="annotate a dataset with KALA knowledge + report",
                                            **shown))
    train_kge.add_arguments(commands.add_parser("train-kge", help="train KG embeddings (TRELM) into a KG folder",
                                                **shown))
    check_knowledge.add_arguments(commands.add_parser(
        "check-knowledge", help="how far a trained model's predictions follow edits of its KG (counterfactual)",
        **shown))
    return parser


def main(argv: list[str] | None = None) -> int:
    from keplm.commands import build_kg as build
    from keplm.commands import check_knowledge, train_kge

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "build-kg":
        build.run(args)
    elif args.command == "train-kge":
        train_kge.run(args)
    elif args.command == "check-knowledge":
        check_knowledge.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
