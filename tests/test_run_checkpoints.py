"""Fine-tuning from a keplm checkpoint through run_ner.py: the same processor, assets and label map, a baseline's
checkpoint, training options that apply to checkpoints, and one KG per process."""

from __future__ import annotations

import pytest
from transformers import AutoModelForTokenClassification, pipeline

import keplm  # noqa: F401  (registers the Auto classes)
from keplm import KalaProcessor
from keplm.training.arguments import ModelArguments
from keplm.training.recipes.kala import KnowledgeArguments, prepare_processor
from tests.test_run_scripts import (
    _conll_dir,
    load_script,
    ner_args,
    read_json,
)


def test_run_ner_reloads_its_checkpoint(tiny, tmp_path):
    """A saved KALA checkpoint is a valid --model_name_or_path: same processor/assets, same eval metrics."""
    run_ner = load_script("run_ner")
    first = tmp_path / "first"
    run_ner.main(ner_args(tiny, first, "relational", "--do_train", "--do_eval", "--knowledge_learning_rate", "1e-3"))
    second = tmp_path / "second"
    args = ner_args(tiny, second, "relational", "--do_eval", "--tag_text", "mary lives in berlin")
    args[args.index("--model_name_or_path") + 1] = str(first)
    results = run_ner.main(args)
    before, after = read_json(first / "eval_results.json"), read_json(second / "eval_results.json")
    for key in ("eval_f1", "eval_accuracy", "eval_loss"):
        assert after[key] == pytest.approx(before[key], abs=1e-5)
    # --tag_text without training tags with the given checkpoint
    model, processor = AutoModelForTokenClassification.from_pretrained(first), KalaProcessor.from_pretrained(first)
    ner = pipeline("keplm-ner", model=model, processor=processor)
    assert results["tagged"] == [{**e, "score": float(e["score"])} for e in ner("mary lives in berlin")]
    assert (second / "tagged_text.json").is_file()


def test_sparse_entity_memory_applies_when_fine_tuning_a_keplm_checkpoint(tiny, tmp_path):
    """--sparse_entity_memory is a training choice: fine-tuning a (dense) KALA checkpoint with it trains the entity
    memory with sparse gradients (it was silently ignored for checkpoints)."""
    run_ner = load_script("run_ner")
    first = tmp_path / "first"
    run_ner.main(ner_args(tiny, first, "relational", "--do_train", "--max_steps", "1"))
    assert not read_json(first / "config.json").get("sparse_entity_memory")
    second = tmp_path / "second"
    args = ner_args(tiny, second, "relational", "--do_train", "--max_steps", "2", "--sparse_entity_memory")
    args[args.index("--model_name_or_path") + 1] = str(first)
    results = run_ner.main(args)
    assert read_json(second / "config.json")["sparse_entity_memory"] is True
    assert AutoModelForTokenClassification.from_pretrained(second).kala.entity_memory.embeddings.sparse
    assert results["train_loss"] == pytest.approx(results["train_loss"])  # finite, not NaN


def test_run_ner_predicts_with_a_baseline_checkpoint(tiny, tmp_path):
    """A vanilla checkpoint (saved without a KG) predicts from its folder alone: its inputs are not linked."""
    run_ner = load_script("run_ner")
    first = tmp_path / "first"
    run_ner.main(ner_args(tiny, first, "vanilla", "--do_train", "--do_eval"))
    args = ner_args(tiny, tmp_path / "second", "vanilla", "--do_eval", "--knowledge", "link")
    args[args.index("--model_name_or_path") + 1] = str(first)
    results = run_ner.main(args)
    assert results["eval_f1"] == pytest.approx(read_json(first / "eval_results.json")["eval_f1"], abs=1e-5)


def test_run_ner_keeps_a_checkpoints_label_map(tiny, tmp_path):
    """Evaluation data using only some of a checkpoint's labels is renumbered to the model's label ids (the
    predictions keep the model's label names); a label the model does not know is an error naming it."""
    run_ner = load_script("run_ner")
    first = tmp_path / "first"
    run_ner.main(ner_args(tiny, first, "relational", "--do_train"))
    subset = _conll_dir(
        tmp_path / "subset",
        {"test": [("john lives in paris .", "B-PER O O B-LOC O"), ("mary visited london .", "B-PER O B-LOC O")]},
    )
    args = ner_args(tiny, tmp_path / "second", "relational", "--do_predict")
    args[args.index("--model_name_or_path") + 1] = str(first)
    args[args.index("--dataset_name") + 1] = subset
    results = run_ner.main(args)
    assert results["predict_words"] == 9
    model_labels = set(AutoModelForTokenClassification.from_pretrained(first).config.id2label.values())
    written = (tmp_path / "second" / "predictions.txt").read_text().split()
    assert {item.rsplit("/", 1)[1] for item in written} <= model_labels
    unknown = _conll_dir(tmp_path / "unknown", {"test": [("john lives in paris .", "B-PER O O B-MISC O")]})
    args[args.index("--dataset_name") + 1] = unknown
    with pytest.raises(ValueError, match="B-MISC"):
        run_ner.main(args)


def test_a_checkpoint_and_its_processor_share_one_kg_in_a_run(tiny, tmp_path):
    """Fine-tuning a keplm checkpoint loads its KG once: the model takes the processor's assets when the checkpoint's
    recorded hashes are theirs (``from_pretrained(knowledge_assets=...)``), and loads its own otherwise."""
    from keplm.knowledge import KnowledgeAssets
    from keplm.training.recipes.kala import build_model

    first = tmp_path / "first"
    load_script("run_ner").main(ner_args(tiny, first, "relational", "--do_train", "--max_steps", "1"))
    knowledge_args = KnowledgeArguments(system="relational", knowledge="link")
    processor = prepare_processor(ModelArguments(model_name_or_path=str(first)), knowledge_args)
    model = build_model(
        AutoModelForTokenClassification, ModelArguments(model_name_or_path=str(first)), knowledge_args, processor, "ner"
    )
    assert model.knowledge_assets is processor.knowledge_assets
    other = KnowledgeAssets(["[NULL]", "Q1"], processor.knowledge_assets.relation_vocab)
    loaded = AutoModelForTokenClassification.from_pretrained(first, knowledge_assets=other)
    assert loaded.knowledge_assets is not other
    assert loaded.knowledge_assets.content_hash() == processor.knowledge_assets.content_hash()


def test_resuming_passes_over_a_checkpoint_whose_save_was_interrupted(tmp_path, caplog):
    """``--resume_from_checkpoint True`` takes the newest checkpoint whose ``trainer_state.json`` (the file the
    Trainer writes last) is whole JSON and whose safetensors files are whole, logging the half-written ones it passes
    over (no state file, a truncated one, cut weights); naming a half-written one is a ValueError naming the file and
    listing the complete ones; a folder that holds none is a ValueError too."""
    import logging

    import torch
    from safetensors.torch import save_file

    from keplm.training.runtime import resume_checkpoint

    save_file({"w": torch.randn(64, 64)}, str(tmp_path / "whole.safetensors"))
    weights = (tmp_path / "whole.safetensors").read_bytes()
    # 10 after 2: numeric, not text, order; 12 and 14 without a state file, 16 a truncated one, 18 cut weights
    for step, state, model in (
        (2, "{}", weights),
        (10, "{}", weights),
        (12, None, weights),
        (14, None, weights),
        (16, '{"log_hi', weights),
        (18, "{}", weights[: len(weights) // 2]),
    ):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(model)
        if state is not None:
            (folder / "trainer_state.json").write_text(state)
    with caplog.at_level(logging.WARNING, logger="keplm.training.runtime"):
        for flag in (True, "True", "last"):
            assert resume_checkpoint(flag, str(tmp_path)) == str(tmp_path / "checkpoint-10")
    assert "checkpoint-12: no trainer_state.json (an interrupted save)" in caplog.text
    assert "checkpoint-14: no trainer_state.json" in caplog.text
    assert "checkpoint-16: trainer_state.json is not whole JSON" in caplog.text
    assert "checkpoint-18: model.safetensors is damaged or cut short" in caplog.text
    assert resume_checkpoint(str(tmp_path / "checkpoint-2"), str(tmp_path)) == str(tmp_path / "checkpoint-2")
    for step, problem in (
        (12, "no trainer_state.json"),
        (16, "trainer_state.json is not whole JSON"),
        (18, "model.safetensors is damaged"),
    ):
        with pytest.raises(ValueError, match=rf"checkpoint-{step}: {problem}.*checkpoint-10"):
            resume_checkpoint(str(tmp_path / f"checkpoint-{step}"), str(tmp_path))
    assert resume_checkpoint(None, str(tmp_path)) is None and resume_checkpoint(False, str(tmp_path)) is None
    with pytest.raises(ValueError, match="no complete checkpoint in"):
        resume_checkpoint(True, str(tmp_path / "checkpoint-12"))
