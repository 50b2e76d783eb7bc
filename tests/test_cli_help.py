"""``keplm <command> --help``: every option of every command has a help text, and none states its default beside
the one ArgumentDefaultsHelpFormatter adds (a value shown twice, or "default: all" before "(default: None)")."""

from __future__ import annotations

import argparse
import re

import pytest

from keplm.cli import COMMANDS, build_parser


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()  # every command with its options
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_option_has_help_and_one_default(command):
    sub = _subparsers()[command]
    options = [a for a in sub._actions if not isinstance(a, argparse._HelpAction)]
    assert [a.option_strings for a in options if not a.help] == []
    stating_a_default = [a.option_strings for a in options if re.search(r"\(default\b|\bdefault:", a.help)]
    assert stating_a_default == []  # "unset: ..." says what leaving a None default does
    text = " ".join(sub.format_help().split())
    assert re.search(r"\(default:? [^)]*\) \(default", text) is None
