"""Start-up time: ``import keplm``, ``keplm --help`` and a run script's ``--help``, each in a fresh interpreter, side
by side with what keplm cannot start faster than: ``import keplm`` registers every method with transformers' Auto
classes (documented APIs, eagerly), which imports transformers' base classes and torch, and a run script's
``--help`` lists transformers' ``TrainingArguments``, whose import alone imports torch and accelerate.

Commands run in turn, ``--repeats`` rounds, in a shuffled order each round; the report gives medians and ratios to
``import transformers`` and to the floor (transformers' base classes). There is no time target: simplicity is worth
more than seconds at start-up.

    python -m benchmarks startup [--repeats 5]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)

#: name -> command (run from the repository root)
COMMANDS = {
    "import transformers": [sys.executable, "-c", "import transformers"],
    "import torch": [sys.executable, "-c", "import torch"],
    "transformers base classes (floor)": [
        sys.executable,
        "-c",
        "from transformers import AutoConfig, AutoModel, AutoProcessor, PreTrainedConfig, PreTrainedModel, "
        "ProcessorMixin, Trainer",
    ],
    "TrainingArguments (run-script floor)": [sys.executable, "-c", "from transformers import TrainingArguments"],
    "import torch_geometric": [sys.executable, "-c", "import torch_geometric"],
    "import keplm": [sys.executable, "-c", "import keplm"],
    "keplm --help": [os.path.join(BIN, "keplm"), "--help"],
    "keplm train-kge --help": [os.path.join(BIN, "keplm"), "train-kge", "--help"],
    "run_ner.py --help": [sys.executable, os.path.join("run_scripts", "run_ner.py"), "--help"],
}


def time_command(command: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one run of ``command`` (output discarded); a failing command is an error."""
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
    return time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks startup", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds; each runs every command once")
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    order = list(COMMANDS)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    for round_ in range(args.repeats):
        random.Random(round_).shuffle(order)
        for name in order:
            times[name].append(time_command(COMMANDS[name], env))
    median = {name: statistics.median(values) for name, values in times.items()}
    print(
        f"# Start-up, {datetime.date.today()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {args.repeats} rounds"
    )
    print("| command | median s | min-max s | / import transformers | / floor |")
    print("|---|---:|---:|---:|---:|")
    for name in COMMANDS:
        print(
            f"| `{name}` | {median[name]:.2f} | {min(times[name]):.2f}-{max(times[name]):.2f} | "
            f"{median[name] / median['import transformers']:.2f} | "
            f"{median[name] / median['transformers base classes (floor)']:.2f} |"
        )


if __name__ == "__main__":
    main()
