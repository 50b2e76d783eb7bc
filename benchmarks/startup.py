"""Start-up time: ``import keplm``, ``keplm --help``, a sub-command's and a run script's ``--help``, each in a fresh
interpreter, side by side with what keplm cannot start faster than (issue 25, "fast start").

Targets: every ``--help`` in <= 2 s; ``import keplm`` no slower than ``import transformers`` + 1 s. Two floors are
measured too: the first use of keplm's Auto-class entries imports transformers' ``PreTrainedConfig`` /
``PreTrainedModel`` / ``ProcessorMixin`` (and torch), and a run script's ``--help`` lists transformers'
``TrainingArguments``, whose import alone imports torch and accelerate; so a run script's ``--help`` is measured
three ways: with the help cache off (``KEPLM_NO_HELP_CACHE=1``), the first call of a command (it finds no entry,
pays the imports and stores the text) and a cached call (``keplm.training.help_cache``). Every command runs with a
temporary ``$KEPLM_CACHE``, emptied before each "first" call; a "cached" call that comes before its round's "first"
call finds the entry of an untimed fill.
Commands run in turn, ``--repeats`` rounds, in a shuffled order each round; the report gives medians and ratios.

    python -m benchmarks startup [--repeats 5]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)

#: name -> command (run from the repository root)
COMMANDS = {
    "import transformers": [sys.executable, "-c", "import transformers"],
    "import torch": [sys.executable, "-c", "import torch"],
    "transformers base classes (floor)": [
        sys.executable, "-c",
        "from transformers import AutoConfig, AutoModel, AutoProcessor, PreTrainedConfig, PreTrainedModel, "
        "ProcessorMixin"],
    "TrainingArguments (run-script floor)": [sys.executable, "-c", "from transformers import TrainingArguments"],
    "import torch_geometric": [sys.executable, "-c", "import torch_geometric"],
    "import keplm": [sys.executable, "-c", "import keplm"],
    "import keplm + first Auto lookup": [
        sys.executable, "-c",
        "import keplm; from transformers import AutoConfig, AutoModel, AutoProcessor; "
        "AutoModel._model_mapping[type(AutoConfig.for_model('kala'))]"],
    "keplm --help": [os.path.join(BIN, "keplm"), "--help"],
    "keplm train-kge --help": [os.path.join(BIN, "keplm"), "train-kge", "--help"],
}
RUN_NER_HELP = [sys.executable, os.path.join("run_scripts", "run_ner.py"), "--help"]
CACHE_OFF, FIRST, CACHED = ("run_ner.py --help (cache off)", "run_ner.py --help (first, fills the cache)",
                            "run_ner.py --help (cached)")
COMMANDS.update({CACHE_OFF: RUN_NER_HELP, FIRST: RUN_NER_HELP, CACHED: RUN_NER_HELP})
#: the variables a command runs with beyond the shared environment
EXTRA_ENV = {CACHE_OFF: {"KEPLM_NO_HELP_CACHE": "1"}}
#: the --help commands held to the 2 s target
HELP_COMMANDS = ("keplm --help", "keplm train-kge --help", CACHE_OFF, FIRST, CACHED)


def time_command(command: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one run of ``command`` (output discarded); a failing command is an error."""
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
    return time.perf_counter() - start


def prepare(name: str, help_folder: str, env: dict[str, str]) -> None:
    """Before a "first" call: no cached help; before a "cached" call: its entry (an untimed fill when missing)."""
    if name == FIRST:
        shutil.rmtree(help_folder, ignore_errors=True)
    elif name == CACHED and not (os.path.isdir(help_folder) and os.listdir(help_folder)):
        time_command(COMMANDS[FIRST], env)
        if not (os.path.isdir(help_folder) and os.listdir(help_folder)):
            raise RuntimeError(f"run_ner.py --help stored no help in {help_folder}: the cached row would time a miss")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks startup", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds; each runs every command once")
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    order = list(COMMANDS)
    with tempfile.TemporaryDirectory(prefix="bench-startup-cache-") as cache:
        env = {key: value for key, value in os.environ.items() if key != "KEPLM_NO_HELP_CACHE"}
        env.update(PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])), KEPLM_CACHE=cache)
        for round_ in range(args.repeats):
            random.Random(round_).shuffle(order)
            for name in order:
                prepare(name, os.path.join(cache, "help"), env)
                times[name].append(time_command(COMMANDS[name], {**env, **EXTRA_ENV.get(name, {})}))
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"# Start-up, {datetime.date.today()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {args.repeats} rounds")
    print("| command | median s | min-max s | / import transformers | / floor |")
    print("|---|---:|---:|---:|---:|")
    for name in COMMANDS:
        print(f"| `{name}` | {median[name]:.2f} | {min(times[name]):.2f}-{max(times[name]):.2f} | "
              f"{median[name] / median['import transformers']:.2f} | "
              f"{median[name] / median['transformers base classes (floor)']:.2f} |")
    target = median["import transformers"] + 1.0
    print(f"\nimport keplm: {median['import keplm']:.2f} s vs the target {target:.2f} s (import transformers + 1 s): "
          f"{'met' if median['import keplm'] <= target else 'missed'}")
    print(f"import keplm + first Auto lookup: "
          f"{median['import keplm + first Auto lookup'] - median['transformers base classes (floor)']:+.2f} s "
          f"over the floor that transformers' base classes set")
    for name in HELP_COMMANDS:
        print(f"{name}: {median[name]:.2f} s vs the target 2 s: {'met' if median[name] <= 2 else 'missed'}")


if __name__ == "__main__":
    main()
