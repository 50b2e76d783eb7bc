"""A fourth method in three files: ToyKG (tests/plugin_method/: config, model, processor; entity markers read through
a lookup table of entity vectors) trains with KeplmTrainer, collates with KeplmDataCollator, saves, loads and pushes
with its knowledge assets over the test Hub server, gets a keplm card with its own knowledge section and runs in the
keplm-ner pipeline, with no edit of a shared file: nothing in keplm/ names it."""

from __future__ import annotations

import re
from pathlib import Path

import datasets
import pytest
import torch
from huggingface_hub import ModelCard
from transformers import AutoModelForTokenClassification, AutoProcessor, pipeline

import keplm  # noqa: F401  (registers keplm's methods and pipelines)
from keplm import KeplmDataCollator, KeplmTrainer
from keplm.hub.card import build_model_card

from .conftest import tiny_encoder_config
from .hub_fixtures import MODEL_REPO_FILES, push_model_and_processor
from .plugin_method import ToyKgConfig, ToyKgForTokenClassification, ToyKgProcessor
from .run_args import QUIET, QUIET_RUN, cpu_training_args

ROOT = Path(__file__).resolve().parent.parent
LABELS = ["O", "B-LOC"]
PLACES = {"paris", "berlin", "france", "seine", "london", "germany"}


def test_no_shared_file_names_the_plugin_method():
    pattern = re.compile(r"toy_?kg|ToyKg|plugin_method", re.IGNORECASE)
    shared = [*(ROOT / "keplm").rglob("*.py"), *(ROOT / "run_scripts").glob("*.py")]
    named = [str(p.relative_to(ROOT)) for p in shared if pattern.search(p.read_text())]
    assert named == []


@pytest.fixture()
def trained(tmp_path, tokenizer, assets):
    texts = (
        "john visited paris .",
        "mary lives in berlin .",
        "the seine flows through france .",
        "john works for acme bank in london .",
        "mary visited germany and paris .",
    )
    sentences = [text.split() for text in texts]
    examples = {"tokens": sentences * 4, "ner_tags": [[int(w in PLACES) for w in s] for s in sentences] * 4}
    processor = ToyKgProcessor(tokenizer, assets)
    features = datasets.Dataset.from_dict(processor.prepare_ner_features(examples))
    torch.manual_seed(0)
    model = ToyKgForTokenClassification(
        ToyKgConfig(
            encoder_config=tiny_encoder_config(tokenizer),
            entity_vocab_size=assets.num_entities,
            num_labels=2,
            id2label=dict(enumerate(LABELS)),
            label2id={label: i for i, label in enumerate(LABELS)},
        )
    )
    model.set_knowledge_assets(assets)
    args = cpu_training_args(
        tmp_path / "run", num_train_epochs=4, per_device_train_batch_size=4, learning_rate=5e-3, logging_steps=1, seed=0
    )
    trainer = KeplmTrainer(
        model=model,
        args=args,
        train_dataset=features,
        processing_class=processor,
        data_collator=KeplmDataCollator.from_processor(processor, model),
    )
    trainer.train()
    return trainer, model.eval(), processor


def _logits(model, processor, text="mary visited paris and france ."):
    batch = KeplmDataCollator.from_processor(processor, model)([processor(text)])
    with torch.no_grad():
        return model(**batch).logits


def test_the_plugin_method_trains_saves_loads_and_tags(trained, tmp_path):
    trainer, model, processor = trained
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[-1] < 0.5 * losses[0]
    features = processor("john visited paris .")
    assert features["entity_ids"][3] == processor.knowledge_assets.entity_row("Q90")  # [CLS] john visited paris
    out = tmp_path / "saved"
    trainer.save_model(str(out))
    loaded = AutoModelForTokenClassification.from_pretrained(out)
    loaded_processor = AutoProcessor.from_pretrained(out)
    assert type(loaded) is ToyKgForTokenClassification and type(loaded_processor) is ToyKgProcessor
    assert loaded.knowledge_assets.content_hash() == processor.knowledge_assets.content_hash()
    torch.testing.assert_close(_logits(loaded, loaded_processor), _logits(model, processor))
    ner = pipeline("keplm-ner", model=loaded, processor=loaded_processor)
    groups = ner("mary visited paris and france .")
    assert [g["word"] for g in groups] == ["paris", "france"] and {g["entity_group"] for g in groups} == {"LOC"}


def test_the_plugin_method_pushes_with_its_knowledge_and_its_card(trained, hub_server):
    _, model, processor = trained
    card = str(build_model_card(model, processor=processor))
    assert "# ToyKG for NER" in card and "adds a learned vector of each linked entity" in card
    assert "## Knowledge" in card and "| entity lookup table |" in card and "## Citation" in card
    files = push_model_and_processor(model, processor, "org/toy-kg")
    assert MODEL_REPO_FILES | {"knowledge/assets_config.json"} <= files
    assert "keplm_test_toy_kg" in ModelCard.load("org/toy-kg").data.tags
    pulled = AutoModelForTokenClassification.from_pretrained("org/toy-kg")
    pulled_processor = AutoProcessor.from_pretrained("org/toy-kg")
    torch.testing.assert_close(_logits(pulled, pulled_processor), _logits(model, processor))


def test_register_method_refuses_a_model_of_another_config():
    from transformers import AutoModel

    from keplm import KalaConfig
    from keplm.registration import REGISTERED_METHODS, register_method

    with pytest.raises(ValueError, match="cannot be registered"):
        register_method(KalaConfig, {AutoModel: ToyKgForTokenClassification})
    assert REGISTERED_METHODS[ToyKgConfig.model_type][2] is ToyKgProcessor
    assert set(REGISTERED_METHODS) >= {"kala", "keplm_relation_extraction", "roof_transformer", "trelm"}


def test_the_plugin_method_trains_in_run_ner_with_its_own_options(tmp_path, tokenizer, kg, capsys):
    """run_ner.py --model_type <ToyKG's model type> takes ToyKG's own options (``--toy_kg``, from the recipe its
    modeling file registers), links, trains, evaluates and predicts, and saves a model that loads through the Auto
    class; ``--help`` lists those options. No script or shared file names ToyKG."""
    from .test_run_scripts import load_script, write_tiny_files

    tiny = write_tiny_files(tmp_path / "tiny", tokenizer, kg)
    run_ner = load_script("run_ner")
    out = tmp_path / "toy-run"
    results = run_ner.main(
        [
            "--model_type",
            ToyKgConfig.model_type,
            "--model_name_or_path",
            tiny["model"],
            "--dataset_name",
            tiny["conll"],
            "--toy_kg",
            tiny["kg"],
            "--output_dir",
            str(out),
            "--max_steps",
            "3",
            "--per_device_train_batch_size",
            "4",
            "--learning_rate",
            "1e-3",
            *QUIET_RUN,
            "--use_cpu",
            "--do_train",
            "--do_eval",
            "--do_predict",
        ]
    )
    assert results["toy_entity_rows"] > 1  # the null row and the entities linked in training
    assert {"train_loss", "eval_f1", "predict_f1"} <= set(results)
    model = AutoModelForTokenClassification.from_pretrained(out)
    assert isinstance(model, ToyKgForTokenClassification)
    assert model.config.entity_vocab_size == results["toy_entity_rows"]
    assert isinstance(AutoProcessor.from_pretrained(out), ToyKgProcessor)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        run_ner.main(["--model_type", ToyKgConfig.model_type, "--help"])
    shown = capsys.readouterr().out
    assert "--toy_kg" in shown and "--toy_min_count" in shown and "--num_train_epochs" in shown
    assert "--kfm_layers" not in shown  # KALA's options belong to KALA's recipe


def test_a_method_without_the_task_is_refused_by_name(tmp_path):
    """run_glue.py with a method that trains no sequence classification: a ValueError naming the method and what it
    trains, before any data is read."""
    from .test_run_scripts import load_script

    with pytest.raises(ValueError, match=r"'keplm_test_toy_kg' does not train the sequence_classification task"):
        load_script("run_glue").main(
            [
                "--model_type",
                ToyKgConfig.model_type,
                "--model_name_or_path",
                "unused",
                "--toy_kg",
                "unused",
                "--task_name",
                "rte",
                "--output_dir",
                str(tmp_path),
            ]
        )
    with pytest.raises(ValueError, match="has no run recipe"):
        load_script("run_glue").main(["--model_type", "no_such_method", "--model_name_or_path", "unused"])


def _install_plugin(site: Path) -> None:
    """ToyKG as an installed package of its own in ``site``: its three files under ``toykg_plugin/`` and the
    distribution metadata that names its module in keplm's entry-point group (what ``pip install`` writes); beside
    it a broken plug-in whose module does not exist."""
    package = site / "toykg_plugin"
    package.mkdir(parents=True)
    for source in (ROOT / "tests" / "plugin_method").glob("*.py"):
        (package / source.name).write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    for name, entry in (("toykg-plugin", "toy_kg = toykg_plugin"), ("broken-plugin", "broken = no_such_module")):
        info = site / f"{name.replace('-', '_')}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n", encoding="utf-8")
        (info / "entry_points.txt").write_text(f"[keplm.methods]\n{entry}\n", encoding="utf-8")


@pytest.mark.slow
def test_an_installed_plugin_is_found_by_entry_point_in_fresh_processes(tmp_path, tokenizer, kg):
    """A method in its own installed package (entry-point group ``keplm.methods``), never imported by the caller:
    after ``import keplm`` the Auto classes know it, ``run_ner.py --model_type`` trains it with its own options,
    its checkpoint loads through the Auto class, training continues from that checkpoint without ``--model_type``,
    and a LoRA adapter of it reloads; a plug-in that fails to import is logged by name and breaks nothing else."""
    import json
    import os
    import subprocess
    import sys

    from .test_run_scripts import write_tiny_files

    site = tmp_path / "site"
    _install_plugin(site)
    tiny = write_tiny_files(tmp_path / "tiny", tokenizer, kg)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]), OMP_NUM_THREADS="1")

    def run(*arguments):
        done = subprocess.run(
            [sys.executable, *arguments], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, done.stderr[-4000:]
        return done

    common = [
        "--dataset_name",
        tiny["conll"],
        "--max_steps",
        "2",
        "--per_device_train_batch_size",
        "4",
        "--save_strategy",
        "no",
        *QUIET,
        "--use_cpu",
        "--do_train",
    ]
    first, second, adapter = tmp_path / "first", tmp_path / "second", tmp_path / "adapter"
    model_type = ToyKgConfig.model_type
    new = ["--model_type", model_type, "--model_name_or_path", tiny["model"], "--toy_kg", tiny["kg"]]
    run("run_scripts/run_ner.py", *new, "--output_dir", str(first), *common)
    run("run_scripts/run_ner.py", "--model_name_or_path", str(first), "--output_dir", str(second), *common)
    run("run_scripts/run_ner.py", *new, "--output_dir", str(adapter), "--lora_r", "2", *common)
    check = run(
        "-c",
        f"""
import json, keplm, transformers
from keplm.modeling.lora import load_lora
print(json.dumps([
    type(transformers.AutoConfig.for_model({model_type!r})).__module__,
    type(transformers.AutoModelForTokenClassification.from_pretrained({str(second)!r})).__name__,
    type(load_lora({str(adapter)!r}).get_base_model()).__name__,
    keplm.load_plugins(),
]))
""",
    )
    module, loaded, lora_base, outcome = json.loads(check.stdout.strip().splitlines()[-1])
    assert module == "toykg_plugin.configuration_toy_kg" and loaded == lora_base == "ToyKgForTokenClassification"
    assert outcome["toy_kg"] == "loaded" and outcome["broken"].startswith("ModuleNotFoundError")
    assert "keplm plug-in 'broken'" in check.stderr and "no_such_module" in check.stderr
    assert json.loads((second / "config.json").read_text())["model_type"] == model_type
