"""The one entry point of the benchmarks: ``python -m benchmarks <name> [options]`` runs benchmark ``name``
(``benchmarks.BENCHMARKS``) with its own options; ``--help`` lists the benchmarks. A benchmark that runs its systems
in worker processes starts them through this entry point as well (the same command line plus a hidden worker
option), so a worker parses exactly the options its parent was given."""

from __future__ import annotations

import importlib
import sys

from benchmarks import BENCHMARKS


def usage() -> str:
    width = max(map(len, BENCHMARKS))
    lines = [
        "usage: python -m benchmarks <name> [options]   (from the repository root)",
        "",
        "benchmarks (python -m benchmarks <name> --help for a benchmark's options):",
    ]
    lines += [f"  {name:<{width}}  {summary}" for name, (_, summary) in BENCHMARKS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in BENCHMARKS:
        print(f"unknown benchmark {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    importlib.import_module(f"benchmarks.{BENCHMARKS[name][0]}").main(rest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
