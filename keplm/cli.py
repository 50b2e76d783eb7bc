"""The ``keplm`` command line: ``keplm build-kg ...``, ``keplm train-kge ...``, ``keplm check-knowledge ...``,
``keplm kg-coverage ...`` (see ``keplm <command> --help``)."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

#: sub-command -> (its module under keplm.commands, its one-line help); a module is imported only when its command
#: is chosen
COMMANDS = {
    "build-kg": ("build_kg", "annotate a dataset with KALA knowledge + report"),
    "train-kge": ("train_kge", "train KG embeddings (TRELM) into a KG folder"),
    "check-knowledge": (
        "check_knowledge",
        "how far a trained model's predictions follow edits of its KG (counterfactual)",
    ),
    "kg-coverage": ("kg_coverage", "will a KG help this NER data? linking coverage, facts and unseen entities"),
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``keplm`` parser with its sub-commands; only the one ``argv`` chooses (all when ``argv`` is None) gets its
    options, which imports that command's module."""
    parser = argparse.ArgumentParser(prog="keplm", description="keplm command-line tools")
    parser.add_argument(
        "--traceback", action="store_true", help="on bad input, the full traceback instead of a one-line error"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    chosen = next((word for word in argv or () if not word.startswith("-")), None)  # its first word not an option
    for name, (module, help_text) in COMMANDS.items():
        # every option's default in --help
        sub = commands.add_parser(name, help=help_text, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        if argv is None or name == chosen:
            importlib.import_module(f"keplm.commands.{module}").add_arguments(sub)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    argv = sys.argv[1:] if argv is None else list(argv)
    return build_parser(argv).parse_args(argv)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    importlib.import_module(f"keplm.commands.{COMMANDS[args.command][0]}").run(args)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one command; bad input raises its ``ValueError`` / ``FileNotFoundError``, as a library call does."""
    return run(parse_args(argv))


def console(argv: list[str] | None = None) -> int:
    """The ``keplm`` program: :func:`main`, with bad input told in one line, ``keplm <command>: error: ...``, and
    exit status 2, as argparse tells a bad option (``keplm --traceback <command> ...``: the full traceback)."""
    args = parse_args(argv)
    try:
        return run(args)
    except (ValueError, FileNotFoundError) as error:
        if args.traceback:
            raise
        print(f"keplm {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(console())
