"""What a first-time user meets: quiet logs by default (loud with --log_level debug) and --help that shows every option,
grouped, with defaults."""

from __future__ import annotations

import logging

import pytest
from transformers import BertModel

from keplm import KalaForTokenClassification
from keplm.training.arguments import KeplmTrainingArguments
from keplm.training.runtime import QUIET_BELOW_DEBUG, setup_logging

from .conftest import tiny_encoder_config


@pytest.fixture()
def restore_levels():
    names = ("keplm", *QUIET_BELOW_DEBUG, "transformers")
    saved = {name: (logging.getLogger(name).level, list(logging.getLogger(name).filters)) for name in names}
    yield
    for name, (level, filters) in saved.items():
        logging.getLogger(name).setLevel(level)
        logging.getLogger(name).filters[:] = filters


def shows_info(name: str) -> bool:
    """Whether an INFO record of logger ``name`` gets past its level and its filters."""
    logger = logging.getLogger(name)
    record = logger.makeRecord(name, logging.INFO, __file__, 0, "a config dump", (), None)
    return logger.isEnabledFor(logging.INFO) and bool(logger.filter(record))


@pytest.mark.parametrize("log_level, config_dumps", [("passive", False), ("info", False), ("debug", True)])
def test_config_dumps_only_at_debug(tmp_path, restore_levels, log_level, config_dumps):
    """transformers' loading loggers (every config printed whole) stay quiet at INFO and speak at DEBUG, while
    the Trainer's own INFO lines keep their level."""
    args = KeplmTrainingArguments(output_dir=str(tmp_path), log_level=log_level, report_to="none", use_cpu=True)
    setup_logging(args)
    for name in QUIET_BELOW_DEBUG:
        assert shows_info(name) is config_dumps
    assert logging.getLogger("transformers.trainer").isEnabledFor(logging.INFO)


def test_loading_a_model_after_the_log_set_up_does_not_warn_of_unsharded_layers(tmp_path, tokenizer, restore_levels):
    """transformers checks a loaded model's tensor-parallel plan, and warns "The following layers were not sharded"
    on a run without tensor parallelism, whenever ``transformers.modeling_utils``'s own level is WARNING or above:
    the run scripts' log set-up quiets its config dumps with a filter, so no run prints that warning."""
    BertModel(tiny_encoder_config(tokenizer)).save_pretrained(tmp_path / "enc")
    setup_logging(KeplmTrainingArguments(output_dir=str(tmp_path), log_level="info", report_to="none", use_cpu=True))
    warnings = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warnings.append(record.getMessage())
    transformers_logger = logging.getLogger("transformers")  # transformers' loggers do not propagate to the root
    transformers_logger.addHandler(handler)
    try:
        BertModel.from_pretrained(tmp_path / "enc")
    finally:
        transformers_logger.removeHandler(handler)
    assert not [message for message in warnings if "not sharded" in message]


@pytest.mark.parametrize("log_level, config_dumps", [("info", False), ("debug", True)])
def test_run_probe_logs_like_the_other_run_scripts(restore_levels, log_level, config_dumps):
    """run_probe.py (its own ``--log_level``, no TrainingArguments) gets the same log set-up: its INFO lines without
    transformers' config and weights-file dumps, which ``--log_level debug`` shows."""
    from .test_probe import load_run_probe

    load_run_probe().setup_logging(log_level)
    for name in QUIET_BELOW_DEBUG:
        assert shows_info(name) is config_dumps
    assert logging.getLogger("keplm").isEnabledFor(logging.INFO)


def test_new_modules_of_a_model_built_on_an_encoder_are_info_not_warning(tmp_path, tokenizer, caplog):
    """Building on an encoder always makes new modules: said at INFO; a warning only for missing encoder weights."""
    BertModel(tiny_encoder_config(tokenizer), add_pooling_layer=False).save_pretrained(tmp_path / "enc")
    tokenizer.save_pretrained(tmp_path / "enc")
    with caplog.at_level(logging.INFO, logger="keplm"):
        KalaForTokenClassification.from_base_pretrained(str(tmp_path / "enc"), retrieval_mode="none", num_labels=2)
    built = [r for r in caplog.records if r.getMessage().startswith("Built KalaForTokenClassification")]
    assert [r.levelno for r in built] == [logging.INFO]


@pytest.mark.parametrize(
    "script, method_group",
    [
        ("run_ner", "KALA (--model_type kala)"),
        ("run_qa", "KALA (--model_type kala)"),
        ("run_glue", "Roof-Transformer (--model_type roof_transformer)"),
    ],
)
def test_help_shows_every_option_grouped_the_methods_before_training(script, method_group, capsys):
    """--help lists the method choice (--model_type), the model, data, the method's and the training options in that
    order, with defaults (the script's first parser, which picks the method, leaves -h to the full one)."""
    from .test_run_scripts import load_script

    with pytest.raises(SystemExit):
        load_script(script).main(["--help"])
    shown = capsys.readouterr().out
    groups = [line for line in shown.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert groups[1:4] == ["method:", "model:", "data:"] and groups[4].startswith(method_group)
    assert groups[5].startswith("training (transformers.TrainingArguments")
    assert "--model_type" in shown and "--num_train_epochs" in shown and "--system" in shown
    assert "(default: main)" in shown


def test_a_run_without_an_accelerator_pins_no_memory_and_so_gets_no_pin_memory_warning(tmp_path, monkeypatch):
    """Pinned memory only speeds copies to an accelerator: on a CPU run torch warned, for every data loader, that
    ``pin_memory`` pins nothing. keplm's training arguments turn it off there, and keep it where an accelerator is."""
    import warnings

    import torch

    from keplm.training import arguments

    monkeypatch.setattr(arguments, "_has_accelerator", lambda: False)  # a machine without GPUs, --use_cpu not given
    args = KeplmTrainingArguments(output_dir=str(tmp_path), report_to="none")
    assert args.dataloader_pin_memory is False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        list(torch.utils.data.DataLoader([torch.zeros(2)], pin_memory=args.dataloader_pin_memory))
    assert not [w for w in caught if "pin_memory" in str(w.message)]
    monkeypatch.setattr(arguments, "_has_accelerator", lambda: True)
    assert KeplmTrainingArguments(output_dir=str(tmp_path), report_to="none").dataloader_pin_memory is True


def test_deepspeed_does_not_warn_about_a_missing_accelerator_on_cpu(tmp_path):
    """accelerate imports DeepSpeed (installed by the set-up) when the Trainer is built, and on a machine without
    accelerators DeepSpeed warned on every run "Setting accelerator to CPU. If you have GPU ...": parse_args tells
    it CPU up front (DS_ACCELERATOR, where no accelerator is found), so the run's log stays quiet."""
    import os
    import subprocess
    import sys

    pytest.importorskip("deepspeed")
    code = (
        "import torch; from keplm.training.arguments import KeplmTrainingArguments, parse_args; "
        "(args,) = parse_args((KeplmTrainingArguments,), ['--output_dir', 'out', '--report_to', 'none']); "
        "import deepspeed; print('accelerator', deepspeed.get_accelerator()._name)"
    )
    env = {key: value for key, value in os.environ.items() if key != "DS_ACCELERATOR"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    if "accelerator cuda" not in result.stdout:  # a CPU machine (this project's)
        assert "accelerator cpu" in result.stdout
        assert "Setting accelerator to CPU" not in result.stdout + result.stderr
