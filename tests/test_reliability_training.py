"""Issue 11, the training side: a tokenizer that does not fit the model, a knowledge run whose KG links nothing,
a bad --kg with a baseline system, and the KG read once per run (docs/reliability.md, rows 6, 9, O3, O5)."""

from __future__ import annotations

import logging

import pytest
import torch
from transformers import BertTokenizerFast, TrainingArguments

from keplm import KalaForTokenClassification, KalaProcessor, RoofTransformerConfig, RoofTransformerProcessor
from keplm.knowledge import KnowledgeAssets
from keplm.modeling.modeling_roof_transformer import RoofTransformerForSequenceClassification
from keplm.training.trainer import KeplmTrainer

from .conftest import tiny_encoder_config
from .test_kala_model import make_model
from .test_run_scripts import load_script, ner_args, read_json, run_ner_main


def _bigger_tokenizer(tokenizer, tmp_path):
    """A copy of ``tokenizer`` with five added tokens."""
    tokenizer.save_pretrained(tmp_path / "tok")
    bigger = BertTokenizerFast.from_pretrained(tmp_path / "tok")
    bigger.add_tokens([f"newword{i}" for i in range(5)])
    return bigger


def test_a_tokenizer_larger_than_the_models_vocabulary_is_refused_where_they_meet(tmp_path, tokenizer, assets):
    """Row 6: the processor / Trainer / pipeline check (`check_model`) names the encoder and both sizes; ids past
    the embeddings that reach a forward directly are a ValueError, not a torch IndexError."""
    model = make_model(KalaForTokenClassification, tokenizer, assets, "relational", num_labels=3)
    bigger = _bigger_tokenizer(tokenizer, tmp_path)
    processor = KalaProcessor(bigger, assets)
    message = rf"the tokenizer has {len(bigger)} tokens but the model's encoder embeds only {len(tokenizer)}"
    with pytest.raises(ValueError, match=message):
        processor.check_model(model)
    with pytest.raises(ValueError, match=message):
        KeplmTrainer(
            model=model,
            args=TrainingArguments(str(tmp_path / "out"), use_cpu=True, report_to="none"),
            processing_class=processor,
        )
    roof = RoofTransformerForSequenceClassification(
        RoofTransformerConfig(encoder_config=tiny_encoder_config(tokenizer), fusion_layers=1, max_knowledge_length=40)
    )
    with pytest.raises(ValueError, match=r"embeds only"):
        RoofTransformerProcessor(bigger, KnowledgeAssets(kg=assets.kg), max_knowledge_length=40).check_model(roof)
    batch = {k: torch.tensor([v]) for k, v in processor("paris newword3").items()}
    with pytest.raises(ValueError, match=r"input_ids must lie in \[0, \d+\), the encoder's vocabulary"):
        model(**batch)


def test_a_tokenizer_other_than_the_trained_one_is_refused_even_when_it_fits(tmp_path, tokenizer, assets):
    """The Trainer records the tokenizer's fingerprint (vocabulary and normaliser) in the config; a processor with
    another tokenizer, even one no larger than the model's vocabulary (a reordered vocabulary, or the cased twin of an
    uncased one), is refused where processor and model meet, also after save / load."""
    from keplm.tokenization import tokenizer_fingerprint

    model = make_model(KalaForTokenClassification, tokenizer, assets, "relational", num_labels=3)
    assert model.config.tokenizer_hash is None
    KeplmTrainer(
        model=model,
        args=TrainingArguments(str(tmp_path / "out"), use_cpu=True, report_to="none"),
        processing_class=KalaProcessor(tokenizer, assets),
    )
    assert model.config.tokenizer_hash == tokenizer_fingerprint(tokenizer)
    vocab = sorted(tokenizer.get_vocab(), key=tokenizer.get_vocab().get)
    shuffled = BertTokenizerFast(
        vocab={t: i for i, t in enumerate([*vocab[:5], *reversed(vocab[5:])])}, do_lower_case=True
    )
    cased = BertTokenizerFast(vocab=tokenizer.get_vocab(), do_lower_case=False)
    for other in (shuffled, cased):
        assert len(other) == len(tokenizer)
        with pytest.raises(ValueError, match="is not the one the model was trained with"):
            KalaProcessor(other, assets).check_model(model)
    model.save_pretrained(tmp_path / "saved")
    reloaded = KalaForTokenClassification.from_pretrained(tmp_path / "saved")
    KalaProcessor(tokenizer, assets).check_model(reloaded)
    with pytest.raises(ValueError, match="another vocabulary or casing"):
        KalaProcessor(cased, assets).check_model(reloaded)


def test_a_model_built_on_a_base_checkpoint_refuses_a_processor_over_another_tokenizer(tmp_path, tokenizer, assets):
    """``from_base_pretrained`` on a checkpoint saved with its tokenizer records that tokenizer's fingerprint: a
    processor over an unrelated, smaller tokenizer (which the vocabulary-size check lets through) is refused when the
    Trainer meets it, and the base's own tokenizer is accepted; a base saved without a tokenizer records nothing."""
    from transformers import BertModel

    from keplm.tokenization import tokenizer_fingerprint

    torch.manual_seed(0)
    BertModel(tiny_encoder_config(tokenizer)).save_pretrained(tmp_path / "bare")
    BertModel(tiny_encoder_config(tokenizer)).save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    smaller = BertTokenizerFast(
        vocab={t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "paris", "zebra"])}
    )
    assert len(smaller) < len(tokenizer)
    kwargs = {"knowledge_assets": assets, "num_labels": 3, "retrieval_mode": "relational"}
    assert KalaForTokenClassification.from_base_pretrained(tmp_path / "bare", **kwargs).config.tokenizer_hash is None
    model = KalaForTokenClassification.from_base_pretrained(tmp_path / "base", **kwargs)
    assert model.config.tokenizer_hash == tokenizer_fingerprint(tokenizer)
    args = TrainingArguments(str(tmp_path / "out"), use_cpu=True, report_to="none")
    with pytest.raises(ValueError, match="is not the one the model was trained with"):
        KeplmTrainer(model=model, args=args, processing_class=KalaProcessor(smaller, assets))
    KeplmTrainer(model=model, args=args, processing_class=KalaProcessor(tokenizer, assets))


def test_a_knowledge_run_whose_kg_links_nothing_warns_and_reports_the_share(tiny, tmp_path, caplog):
    """Row 9: a relational run whose KG links no training mention is vanilla in disguise: a WARNING says so and
    the results carry train_linked_share = 0."""
    from keplm.knowledge import KnowledgeGraph

    empty_dir = tmp_path / "unrelated-kg"
    KnowledgeGraph.from_triples(
        [("Q1", "P1", "Q2")], entity_names={"Q1": "zanzibarite", "Q2": "quuxland"}
    ).save_pretrained(empty_dir)
    out = tmp_path / "out"
    args = ner_args(tiny, out, "relational", "--do_train", "--knowledge", "link", "--kg", str(empty_dir))
    with caplog.at_level(logging.WARNING):
        load_script("run_ner").main(args)
    assert any(
        "has no linked entity mention" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records
    )
    assert read_json(out / "all_results.json")["train_linked_share"] == 0.0


def test_a_bad_kg_with_a_baseline_fails_before_training(tiny, tmp_path):
    """Row O3: --system vanilla with a --kg that names nothing fails at the start (the KG defines the seen / unseen
    subsets of every system), before any training step or output."""
    out = tmp_path / "out"
    with pytest.raises(FileNotFoundError, match="no-such-kg"):
        run_ner_main(
            tiny,
            out,
            "vanilla",
            "--do_train",
            "--do_predict",
            "--knowledge",
            "link",
            "--kg",
            f"tsv:{tmp_path / 'no-such-kg.tsv'}",
        )
    assert not (out / "trainer_state.json").exists() and not (out / "model.safetensors").exists()


def test_a_baseline_run_reads_its_kg_once_and_says_so(tiny, tmp_path, monkeypatch, caplog):
    """Row O5: the KG is loaded once, at the start, with a log line (no silent reload after prediction)."""
    import keplm.training.recipes.kala as setup  # KALA's recipe loads the KG

    loads = []
    original = setup.load_kg
    monkeypatch.setattr(setup, "load_kg", lambda spec, *a, **k: loads.append(spec) or original(spec, *a, **k))
    with caplog.at_level(logging.INFO, logger="keplm"):
        run_ner_main(tiny, tmp_path / "out", "vanilla", "--do_train", "--do_predict")
    assert loads == [tiny["kg"]]
    assert any("Loading the knowledge graph" in r.getMessage() for r in caplog.records)


def test_max_seq_length_beyond_the_encoders_positions_fails_before_featurizing(tiny, tmp_path):
    """--max_seq_length above the tiny encoder's 128 positions is refused where the model is built, before any
    featurizing or training (a torch index error at the first long batch otherwise); the limit itself is allowed,
    and a Roof-Transformer reading its text in two windows allows twice its positions."""
    from types import SimpleNamespace

    from keplm.configuration import RoofTransformerConfig
    from keplm.training.runtime import check_max_seq_length

    out = tmp_path / "out"
    with pytest.raises(ValueError, match="--max_seq_length 256 exceeds the 128 text tokens"):
        run_ner_main(tiny, out, "relational", "--do_train", "--max_seq_length", "256")
    assert not (out / "trainer_state.json").exists()
    bert = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=128))  # a plain encoder (no keplm config)
    check_max_seq_length(128, bert)
    with pytest.raises(ValueError, match="129 exceeds the 128"):
        check_max_seq_length(129, bert)
    encoder = {
        "model_type": "bert",
        "hidden_size": 8,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 16,
        "max_position_embeddings": 128,
    }
    roof = SimpleNamespace(
        config=RoofTransformerConfig(
            encoder_config=encoder, num_text_encoders=2, fusion_layers=1, max_knowledge_length=64
        )
    )
    check_max_seq_length(256, roof)
    with pytest.raises(ValueError, match="257 exceeds the 256"):
        check_max_seq_length(257, roof)


def test_resume_from_a_checkpoint_with_a_missing_or_truncated_state_file_names_the_file(tiny, tmp_path):
    """A checkpoint without its optimizer or RNG state, or with a truncated one, is refused with the file's name
    (the stock Trainer would silently restart the optimizer or the random streams); an intact one resumes, and the
    results say which steps train_loss covers."""
    import shutil

    run_ner = load_script("run_ner")
    out = tmp_path / "out"
    run_ner.main(ner_args(tiny, out, "vanilla", "--do_train", "--save_strategy", "steps", "--save_steps", "3"))
    saved = out / "checkpoint-3"
    assert (saved / "optimizer.json").is_file() and (saved / "rng_state.safetensors").is_file()
    assert read_json(out / "all_results.json")["train_loss_steps"] == 3
    # an intact checkpoint resumes, and its train_loss says it covers the resumed steps only
    resumed = run_ner.main(
        ner_args(
            tiny,
            tmp_path / "resumed",
            "vanilla",
            "--do_train",
            "--max_steps",
            "5",
            "--resume_from_checkpoint",
            str(saved),
        )
    )
    assert resumed["train_resumed_from_step"] == 3 and resumed["train_loss_steps"] == 2

    def resume(edit, error, match):
        checkpoint = tmp_path / f"edited-{edit.__name__}"
        shutil.copytree(saved, checkpoint)
        edit(checkpoint)
        args = ner_args(
            tiny,
            tmp_path / f"resumed-{edit.__name__}",
            "vanilla",
            "--do_train",
            "--max_steps",
            "5",
            "--resume_from_checkpoint",
            str(checkpoint),
        )
        with pytest.raises(error, match=match):
            run_ner.main(args)

    def no_optimizer(folder):
        (folder / "optimizer.safetensors").unlink()

    def no_rng(folder):
        (folder / "rng_state.json").unlink()

    def truncated_scheduler(folder):
        path = folder / "scheduler.json"
        path.write_text(path.read_text()[:5])

    resume(no_optimizer, FileNotFoundError, r"its optimizer state \(optimizer.safetensors\) is missing")
    resume(no_rng, FileNotFoundError, r"its rng_state state \(rng_state.json\) is missing")
    resume(truncated_scheduler, ValueError, r"scheduler.json is unreadable")

    def truncated(name):  # safetensors' and json's own errors name no file: each must be named all the same
        def edit(folder):
            path = folder / name
            path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])

        edit.__name__ = f"truncated_{name}"
        return edit

    for name in ("optimizer.safetensors", "rng_state.safetensors", "scheduler.safetensors", "model.safetensors"):
        if (saved / name).is_file():
            resume(truncated(name), ValueError, rf"{name} is damaged or cut short")
    assert (saved / "model.safetensors").is_file()
    resume(truncated("trainer_state.json"), ValueError, r"trainer_state.json is not whole JSON")


def test_accelerate_cpu_launch_of_several_processes_that_starts_one_warns(caplog):
    """`accelerate launch --cpu --num_processes 2` runs its simple launcher: one process, with MASTER_ADDR set but no
    WORLD_SIZE. The run scripts warn and name the working form; a torchrun-started process or a plain run does not."""
    from keplm.training.runtime import warn_single_process_launch

    simple = {"ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    with caplog.at_level(logging.WARNING, logger="keplm"):
        assert warn_single_process_launch(simple)
    assert any("--multi_gpu --num_processes N" in r.getMessage() for r in caplog.records)
    assert not warn_single_process_launch({**simple, "WORLD_SIZE": "2", "RANK": "0"})
    assert not warn_single_process_launch({"ACCELERATE_USE_CPU": "True"})  # --cpu, one process asked for
    assert not warn_single_process_launch({})


def test_a_baseline_trained_into_a_knowledge_models_folder_fails_before_training(tiny, tmp_path):
    """A reused --output_dir that holds a KALA model: a vanilla run there would only fail after training, when its
    processor's save meets the other model's knowledge assets; now it fails before the first step. Rerunning the same
    system into its own folder still works."""
    run_ner = load_script("run_ner")
    out = tmp_path / "out"
    run_ner.main(ner_args(tiny, out, "relational", "--do_train"))
    first = (out / "model.safetensors").stat().st_mtime_ns
    with pytest.raises(ValueError, match="holds another run's model .* this run would fail when it saves"):
        run_ner.main(ner_args(tiny, out, "vanilla", "--do_train"))
    assert (out / "model.safetensors").stat().st_mtime_ns == first  # nothing trained or written
    run_ner.main(ner_args(tiny, out, "relational", "--do_train"))


def test_saved_configs_and_training_arguments_hold_no_machine_path(tiny, tmp_path, monkeypatch):
    """config.json kept the base encoder's absolute folder as the nested encoder config's ``_name_or_path`` and
    training_args.json the absolute output folder: both are machine paths in every saved or pushed folder. The nested
    name is dropped (as transformers drops the top level's) and argument paths are made relative or cut to their last
    component."""
    import os

    from keplm.file_utils import portable_paths

    from .test_repository_hygiene import machine_paths

    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    out = tmp_path / "absolute-out"  # outside the working directory: cut to its last component
    run_ner_main(tiny, out, "relational", "--do_train")
    config_text = (out / "config.json").read_text()
    assert os.path.isabs(tiny["model"]) and tiny["model"] not in config_text and "_name_or_path" not in config_text
    saved_args = read_json(out / "training_args.json")
    assert saved_args["output_dir"] == "absolute-out"
    assert not machine_paths((out / "training_args.json").read_text())
    assert portable_paths({"a": [str(tmp_path / "x" / "y")], "b": "org/name", "c": 3}, root=tmp_path) == {
        "a": [os.path.join("x", "y")],
        "b": "org/name",
        "c": 3,
    }


@pytest.mark.parametrize(
    "options, message",
    [
        ({"do_train": True, "num_train_epochs": 0}, "--num_train_epochs 0 with --do_train trains nothing"),
        ({"do_train": True, "num_train_epochs": 0.0, "max_steps": -1}, "--num_train_epochs 0 with --do_train"),
        ({"use_cpu": True, "fp16": True}, "--fp16 has no effect with --use_cpu"),
    ],
)
def test_training_options_that_would_do_nothing_are_refused_by_name(tmp_path, options, message):
    from keplm.training.arguments import KeplmTrainingArguments

    with pytest.raises(ValueError, match=message):
        KeplmTrainingArguments(output_dir=str(tmp_path), report_to="none", **options)
    # the same options with work to do are accepted
    KeplmTrainingArguments(output_dir=str(tmp_path), report_to="none", do_train=True, max_steps=2, num_train_epochs=0)
