"""One place that checks the run scripts' option values, once, right after parsing and before any work.

Every argument dataclass of keplm declares the valid interval of each of its numeric options in a table of its own,
a class attribute beside its fields (``option_ranges = {"entity_dropout": "[0, 1)", ...}``; a subclass adds to its
parents'; field metadata cannot hold it, as ``HfArgumentParser`` passes metadata on to argparse). transformers' own
``TrainingArguments`` fields, which keplm cannot annotate, take theirs from :data:`TRAINING_RANGES`.
:func:`check_option_values` walks every parsed dataclass: NaN in any float option, and a value outside its
interval, is a ValueError naming the option, the interval and the value. The combinations an option is refused in
(``--num_train_epochs 0`` with ``--do_train``, ``--fp16`` on the CPU, ``--doc_stride`` with generative QA, ...) stay
in the ``__post_init__`` of the dataclass that holds it, and what depends on the model or tokenizer
(``--max_seq_length`` beyond the encoder's positions, a question that leaves no room for its context) is checked
where that is loaded. :func:`option_table` lists every interval, for the docs (docs/run_scripts.md).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable

#: the class attribute that holds a dataclass's table of intervals
RANGES_ATTRIBUTE = "option_ranges"

#: intervals of the ``transformers.TrainingArguments`` options keplm's scripts read (those it cannot annotate)
TRAINING_RANGES = {
    "learning_rate": "[0, inf)",
    "weight_decay": "[0, inf)",
    "adam_beta1": "[0, 1)",
    "adam_beta2": "[0, 1)",
    "adam_epsilon": "(0, inf)",
    "max_grad_norm": "[0, inf)",
    "num_train_epochs": "[0, inf)",
    "warmup_steps": "[0, inf)",
    "label_smoothing_factor": "[0, 1)",
    "per_device_train_batch_size": "[1, inf)",
    "per_device_eval_batch_size": "[1, inf)",
    "gradient_accumulation_steps": "[1, inf)",
    "eval_accumulation_steps": "[1, inf)",
    "dataloader_num_workers": "[0, inf)",
    "save_total_limit": "[1, inf)",
}

_INTERVAL = re.compile(r"^([\[(])\s*(-inf|[-+]?\d+(?:\.\d+)?)\s*,\s*(inf|[-+]?\d+(?:\.\d+)?)\s*([\])])$")


def parse_interval(text: str) -> tuple[float, float, bool, bool]:
    """``(low, high, low included, high included)`` of an interval written ``[0, 1)``, ``(0, inf)``, ..."""
    match = _INTERVAL.match(text.strip())
    if match is None:
        raise ValueError(f"an option range is written like '[0, 1)' or '(0, inf)', got {text!r}")
    opening, low, high, closing = match.groups()
    return float(low), float(high), opening == "[", closing == "]"


def in_interval(value: float, text: str) -> bool:
    """Whether ``value`` lies in the interval ``text`` (NaN lies in none)."""
    low, high, low_closed, high_closed = parse_interval(text)
    return (value >= low if low_closed else value > low) and (value <= high if high_closed else value < high)


def declared_ranges(cls: type) -> dict[str, str]:
    """``{option: interval}`` of an argument dataclass: its own table over its parents' and transformers'."""
    ranges = dict(TRAINING_RANGES)
    for klass in reversed(cls.__mro__):
        ranges.update(vars(klass).get(RANGES_ATTRIBUTE, {}))
    return ranges


def check_option_values(*parsed) -> None:
    """ValueError naming the first option of ``parsed`` (argument dataclass instances) that is NaN or lies outside
    its interval; an option left unset (None) is not checked. A list option is checked element by element."""
    for arguments in parsed:
        if not dataclasses.is_dataclass(arguments):
            continue
        ranges = declared_ranges(type(arguments))
        for spec in dataclasses.fields(arguments):
            name, interval = spec.name, ranges.get(spec.name)
            value = getattr(arguments, name, None)
            values = value if isinstance(value, (list, tuple)) else [value]
            for item in values:
                if isinstance(item, bool) or not isinstance(item, (int, float)):
                    continue
                if isinstance(item, float) and math.isnan(item):
                    raise ValueError(f"--{name} is NaN: give a number" + (f" in {interval}" if interval else ""))
                if interval is not None and not in_interval(item, interval):
                    raise ValueError(f"--{name} must lie in {interval}, got {item:g}")


def option_table(classes: Iterable[type]) -> list[tuple[str, str, str]]:
    """``(option, interval, dataclass)`` of every option with an interval in ``classes``, in field order (an option
    that several classes declare with the same interval, listed once)."""
    rows, seen = [], set()
    for cls in classes:
        ranges = declared_ranges(cls)
        for spec in dataclasses.fields(cls):
            interval = ranges.get(spec.name)
            if interval is not None and (spec.name, interval) not in seen:
                parse_interval(interval)
                seen.add((spec.name, interval))
                rows.append((f"--{spec.name}", interval, cls.__name__))
    return rows


__all__ = [
    "RANGES_ATTRIBUTE",
    "TRAINING_RANGES",
    "check_option_values",
    "declared_ranges",
    "in_interval",
    "option_table",
    "parse_interval",
]
