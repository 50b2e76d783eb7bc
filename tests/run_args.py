"""Command-line pieces the run-script tests share."""

#: no progress bars and no reporting integrations
QUIET = ("--report_to", "none", "--disable_tqdm", "1")
#: a short test run: quiet, no checkpoints, seed 0
QUIET_RUN = (*QUIET, "--save_strategy", "no", "--seed", "0")


def cpu_training_args(output_dir, **options):
    """``TrainingArguments`` of a quiet CPU test run without checkpoints; ``options`` set the rest."""
    from transformers import TrainingArguments

    defaults = {"report_to": "none", "use_cpu": True, "save_strategy": "no", "disable_tqdm": True}
    return TrainingArguments(output_dir=str(output_dir), **{**defaults, **options})


def build_ner_kg(data, kg: str, output_dir, *flags: str) -> None:
    """``keplm build-kg --task ner`` on the CoNLL folder ``data`` with the KG ``kg``, without plots."""
    from keplm.cli import main

    main(
        [
            "build-kg",
            "--task",
            "ner",
            "--dataset",
            str(data),
            "--kg",
            kg,
            "--output_dir",
            str(output_dir),
            "--no_plot",
            *flags,
        ]
    )


#: four logged steps of batch 2, quiet, seed 0, a checkpoint every 2 steps (the resume and multi-process tests)
FOUR_STEPS_SAVED_EVERY_2 = (
    *("--max_steps", "4", "--per_device_train_batch_size", "2", "--logging_steps", "1", *QUIET, "--seed", "0"),
    *("--save_strategy", "steps", "--save_steps", "2"),
)
