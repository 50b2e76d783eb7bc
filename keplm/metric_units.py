"""One unit for every task metric keplm's run scripts report: percent (0-100), as the papers, the SQuAD metric and
the docs' tables give them.

The metric functions (:mod:`keplm.training.metrics`) keep the conventions of their
Hub namesakes (``squad`` in percent; ``seqeval``, ``glue`` and P@k as fractions); what the Trainer logs and the run
scripts write goes through :func:`to_percent`, and every results file says its unit under ``metric_unit``. Data
statistics written beside the metrics (``*_linked_share``) are not scores and stay fractions of 1.

Records written before that key existed (the committed ``runs/`` and ``results/runs/``) hold fractions, except the
SQuAD ones: readers turn a record into percent with :func:`percent_factor` and the old unit of its task.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping

#: the unit of the metrics the run scripts report, and the results files' key that names it
METRIC_UNIT = "percent"
METRIC_UNIT_KEY = "metric_unit"
#: what one recorded unit is worth in percent
_PERCENT_PER_UNIT = {"percent": 1.0, "fraction": 100.0}


def to_percent(scores: Mapping[str, object]) -> dict[str, object]:
    """``scores`` (fractions, as the formulas return them) in percent: every non-integral number (Python or numpy
    float) is multiplied by 100; integers (counts such as ``num_predicted``), booleans, ``None`` and nested values
    stay as they are."""
    return {
        key: 100.0 * float(value)
        if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral)
        else value
        for key, value in scores.items()
    }


def percent_factor(record: Mapping[str, object], legacy_unit: str) -> float:
    """The factor that turns ``record``'s metrics into percent: from its ``metric_unit``, or ``legacy_unit``
    (``"fraction"`` or ``"percent"``, the convention its task had) for a record written without one."""
    unit = record.get(METRIC_UNIT_KEY, legacy_unit)
    if unit not in _PERCENT_PER_UNIT:
        raise ValueError(
            f"unknown metric unit {unit!r} (record key {METRIC_UNIT_KEY!r} or legacy unit); "
            f"expected one of {sorted(_PERCENT_PER_UNIT)}"
        )
    return _PERCENT_PER_UNIT[unit]


__all__ = ["METRIC_UNIT", "METRIC_UNIT_KEY", "to_percent", "percent_factor"]
