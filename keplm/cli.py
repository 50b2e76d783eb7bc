"""The ``keplm`` command line: ``keplm build-kg ...``, ``keplm train-kge ...``, ``keplm check-knowledge ...``,
``keplm kg-coverage ...`` (see ``keplm <command> --help``)."""

from __future__ import annotations

import argparse
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
    import importlib

    parser = argparse.ArgumentParser(prog="keplm", description="keplm command-line tools")
    commands = parser.add_subparsers(dest="command", required=True)
    chosen = next((word for word in argv or () if not word.startswith("-")), None)  # its first word not an option
    for name, (module, help_text) in COMMANDS.items():
        # every option's default in --help
        sub = commands.add_parser(name, help=help_text, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        if argv is None or name == chosen:
            importlib.import_module(f"keplm.commands.{module}").add_arguments(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    import importlib

    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    importlib.import_module(f"keplm.commands.{COMMANDS[args.command][0]}").run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
