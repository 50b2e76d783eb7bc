"""The pieces the run scripts build on, on the tiny files of tests/test_run_scripts.py: features (cached and
fingerprinted), the entity vocabulary and its initialisation, word tags, evaluation order and the Trainer's columns."""

from __future__ import annotations

import datasets
import torch
from transformers import pipeline

import keplm  # noqa: F401  (registers the Auto classes)
from keplm import KalaForQuestionAnswering, KalaForTokenClassification, KeplmDataCollator
from keplm.data import load_qa_dataset
from keplm.io_utils import content_fingerprint
from keplm.training.arguments import ModelArguments
from keplm.training.entity_init import initialize_entity_memory_from_encoder
from keplm.training.knowledge_setup import Featurizer, featurize
from keplm.training.recipes.kala import KnowledgeArguments, add_knowledge, build_entity_vocabulary, prepare_processor
from tests.test_run_scripts import (
    CONLL,
)


def _processor_and_features(tiny, system="relational", **knowledge):
    data = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(
                {
                    "id": [str(i) for i in range(len(CONLL["train"]))],
                    "tokens": [w.split() for w, _ in CONLL["train"]],
                    "ner_tags": [[0] * len(w.split()) for w, _ in CONLL["train"]],
                }
            )
        }
    )
    knowledge_args = KnowledgeArguments(system=system, kg=tiny["kg"], **knowledge)
    model_args = ModelArguments(tiny["model"])
    processor = prepare_processor(model_args, knowledge_args)
    data = add_knowledge(data, processor, knowledge_args, "ner")
    return data, build_entity_vocabulary(processor, data, model_args, knowledge_args, "ner")


def ner_featurizer(processor, with_knowledge=True, **arguments) -> Featurizer:
    return Featurizer(processor, "prepare_ner_features", with_knowledge=with_knowledge, **arguments)


def test_entity_memory_initialised_with_mean_mention_states(tiny):
    data, processor = _processor_and_features(tiny)
    features = featurize(data["train"], ner_featurizer(processor))
    model = KalaForTokenClassification.from_base_pretrained(
        tiny["model"], knowledge_assets=processor.knowledge_assets, retrieval_mode="relational", num_labels=3
    )
    collator = KeplmDataCollator.from_processor(processor, model)
    before = model.kala.entity_memory.embeddings.weight.detach().clone()
    written = initialize_entity_memory_from_encoder(model, features, collator, batch_size=3, disable_tqdm=True)
    assets = processor.knowledge_assets
    assert written == assets.num_entities - 1  # every training entity is mentioned
    after = model.kala.entity_memory.embeddings.weight.detach()
    assert torch.equal(after[0], before[0]) and not after[0].any()
    # Paris (Q90) is mentioned once, in "john lives in paris .": its row is the mean state of that mention's tokens
    row = assets.entity_row("Q90")
    batch = collator([features[2]])
    hidden = model.kala.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    token_map = batch["entity_token_map"][0]
    in_paris = (token_map >= 0) & (batch["node_entity_ids"][token_map.clamp(min=0)] == row)
    assert in_paris.sum() == 1
    torch.testing.assert_close(after[row], hidden[0][in_paris].mean(0), atol=1e-5, rtol=1e-5)
    assert model.kala._state is None


def test_entity_vocabulary_pruned_by_frequency(tiny):
    _, processor = _processor_and_features(tiny)
    full = processor.knowledge_assets
    assert {"Q90", "Q64", "Q84", "Q1471", "Q142", "Q60", "Q515", "Q183"} <= set(full.entity_vocab)
    # "new york" and its alias "big apple" are the only entity mentioned twice in the training sentences
    _, pruned = _processor_and_features(tiny, entity_min_count=2)
    assert pruned.knowledge_assets.entity_vocab == ["[NULL]", "Q60"]
    _, capped = _processor_and_features(tiny, max_entities=3)
    assert capped.knowledge_assets.num_entities == 4 and capped.knowledge_assets.entity_vocab[1] == "Q60"
    assert capped.knowledge_assets.relation_vocab == full.relation_vocab == pruned.knowledge_assets.relation_vocab


def test_features_are_cached_and_fingerprinted(tiny, tmp_path):
    data, processor = _processor_and_features(tiny)
    data.save_to_disk(tmp_path / "raw")
    train = datasets.load_from_disk(tmp_path / "raw")["train"]
    featurizer = ner_featurizer(processor, max_length=32)
    first = featurize(train, featurizer)
    second = featurize(train, featurizer)
    assert first.cache_files and first.cache_files == second.cache_files  # reloaded, not recomputed
    for other in (ner_featurizer(processor, max_length=16), ner_featurizer(processor, False, max_length=32)):
        assert content_fingerprint(train, **other.signature()) != first._fingerprint
    parallel = featurize(train, ner_featurizer(processor, max_length=32), num_proc=2, overwrite_cache=True)
    assert parallel["entity_token_map"] == first["entity_token_map"]
    assert parallel["node_entity_ids"] == first["node_entity_ids"]


def test_ner_pipeline_without_knowledge(tiny):
    """A vanilla model and the processor a vanilla run saves (no KG) tag raw text with odd spacing: every entity is
    whole words of the text; blank text has none."""
    _, processor = _processor_and_features(tiny, system="vanilla")
    processor = processor.without_knowledge()  # what a vanilla run saves
    assert processor.kg is None
    model = KalaForTokenClassification.from_base_pretrained(
        tiny["model"], retrieval_mode="none", num_labels=2, id2label={0: "O", 1: "B-LOC"}, label2id={"O": 0, "B-LOC": 1}
    )
    with torch.no_grad():
        model.classifier.bias.copy_(torch.tensor([-1.0, 1.0]))  # every word B-LOC: one entity per word
    ner = pipeline("keplm-ner", model=model, processor=processor)
    text = "  paris   is a city "
    assert [(text[e["start"] : e["end"]], e["entity_group"]) for e in ner(text)] == [
        ("paris", "LOC"),
        ("is", "LOC"),
        ("a", "LOC"),
        ("city", "LOC"),
    ]
    assert ner("   ") == []


def test_eval_order_is_kept_under_group_by_length(tiny, tmp_path):
    from transformers import TrainingArguments

    from keplm.training.trainer import KeplmTrainer

    data, processor = _processor_and_features(tiny, system="vanilla")
    features = featurize(data["train"], ner_featurizer(processor, with_knowledge=False))
    model = KalaForTokenClassification.from_base_pretrained(tiny["model"], retrieval_mode="none", num_labels=3)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        train_sampling_strategy="group_by_length",
        use_cpu=True,
        report_to="none",
        per_device_eval_batch_size=3,
    )
    trainer = KeplmTrainer(
        model=model,
        args=args,
        data_collator=KeplmDataCollator.from_processor(processor, model),
        processing_class=processor,
    )
    order = list(trainer.get_test_dataloader(features).sampler)
    assert order == list(range(len(features)))


def test_trainer_keeps_knowledge_columns_and_drops_postprocessing_ones(tiny, tmp_path):
    from transformers import TrainingArguments

    from keplm.tokenization.processing_kala import KNOWLEDGE_COLUMNS
    from keplm.training.trainer_qa import QuestionAnsweringTrainer, _model_features

    raw = load_qa_dataset(tiny["squad"], split_by_article=(2, 1, 1))
    knowledge_args = KnowledgeArguments(system="relational", kg=tiny["kg"])
    model_args = ModelArguments(tiny["model"])
    processor = prepare_processor(model_args, knowledge_args)
    raw = add_knowledge(raw, processor, knowledge_args, "qa")
    processor = build_entity_vocabulary(processor, raw, model_args, knowledge_args, "qa")
    features = featurize(
        raw["validation"],
        Featurizer(
            processor,
            "prepare_qa_features",
            max_length=32,
            doc_stride=8,
            training=False,
            question_annotation_column=None,
        ),
    )
    assert {"example_id", "offset_mapping", *KNOWLEDGE_COLUMNS} <= set(features.column_names)
    model = KalaForQuestionAnswering.from_base_pretrained(tiny["model"], knowledge_assets=processor.knowledge_assets)
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    trainer = QuestionAnsweringTrainer(
        model=model,
        args=args,
        processing_class=processor,
        data_collator=KeplmDataCollator.from_processor(processor, model),
    )
    kept = trainer._remove_unused_columns(_model_features(features))
    assert set(kept.column_names) == {"input_ids", "token_type_ids", "attention_mask", *KNOWLEDGE_COLUMNS}


def test_word_without_sub_token_keeps_later_tags_in_place(tokenizer):
    """A word that yields no sub-token (a lone zero-width space) no longer shifts every later tag: predictions map
    through word_ids, the word is predicted O and scored with its gold tag; words cut off by max_length are
    counted and left out of the scores."""
    from keplm.training.tagging import word_level_tags

    id2label = {0: "O", 1: "B-PER", 2: "B-LOC"}
    words = [["john", "\u200b", "paris"], ["mary", "lives", "in", "berlin"]]
    gold = [["B-PER", "B-MISC", "B-LOC"], ["B-PER", "O", "O", "B-LOC"]]
    encoding = tokenizer(words, is_split_into_words=True, truncation=True, max_length=5)
    assert encoding.word_ids(0) == [None, 0, 2, None]  # the zero-width word has no token
    labels = [[-100, 1, 2, -100, -100], [-100, 1, 0, 0, -100]]  # "berlin" is cut off by max_length=5
    predicted = [[0, 1, 2, 0, 0], [0, 1, 0, 0, 0]]
    written, tags, references, counts = word_level_tags(labels, predicted, words, gold, tokenizer, id2label, 5)
    assert written == [["B-PER", "O", "B-LOC"], ["B-PER", "O", "O", "O"]]
    assert tags == [["B-PER", "O", "B-LOC"], ["B-PER", "O", "O"]]
    assert references == [["B-PER", "B-MISC", "B-LOC"], ["B-PER", "O", "O"]]
    assert counts == {"words": 7, "words_without_token": 1, "words_truncated": 1}
    # the training and validation splits' count, by hand: words with sub-tokens but none inside the cut
    from keplm.training.tagging import count_words_cut

    assert count_words_cut(tokenizer, words, 5) == 1  # "berlin"
    assert count_words_cut(tokenizer, words, 4) == 2  # "in", "berlin"; the zero-width word is never counted
    assert count_words_cut(tokenizer, words, 128) == 0 and count_words_cut(tokenizer, [], 4) == 0
