"""Issue 24, linking and featurising: mention spans that cut through a word, label ids outside the model's labels,
facts naming a relation the KG lacks, and the HF processor call for every processor (docs/reliability.md, Round 3)."""

from __future__ import annotations

import logging

import pytest
import torch

from keplm import KalaForTokenClassification, KalaProcessor, KnowledgeAnnotation, TrelmProcessor
from keplm.data.collator import KeplmDataCollator

from .test_kala_model import make_model

TEXT = "john visited unknownia and paris ."  # the tokenizer splits "unknownia" into "unknown" "##ia"


def test_a_mention_that_cuts_through_a_word_is_widened_to_the_word_with_a_warning_and_a_count(
    tokenizer, assets, caplog
):
    """A given mention whose offsets cut a word ("unknown" of "unknownia", "ari" of "paris") covers the whole word
    in the features, as the same mention given on the word would; the processor warns and counts each widening
    (``alignment_report``); a mention on word boundaries is kept as it is."""
    cut = {
        "entities": [
            {"text": "unknown", "start": 13, "end": 20, "id": "Q999"},
            {"text": "ari", "start": 28, "end": 31, "id": "Q90"},
        ],
        "triplets": [],
    }
    whole = {
        "entities": [
            {"text": "unknownia", "start": 13, "end": 22, "id": "Q999"},
            {"text": "paris", "start": 27, "end": 32, "id": "Q90"},
        ],
        "triplets": [],
    }
    annotation, widened = KnowledgeAnnotation.from_dict(cut).widened_to_words(TEXT)
    assert widened == 2 and annotation.to_dict() == KnowledgeAnnotation.from_dict(whole).to_dict()
    assert KnowledgeAnnotation.from_dict(whole).widened_to_words(TEXT)[1] == 0

    processor = KalaProcessor(tokenizer, assets)
    with caplog.at_level(logging.WARNING, logger="keplm.tokenization.processing_utils"):
        from_cut = processor(TEXT, annotation=cut)
    assert from_cut["entity_token_map"] == processor(TEXT, annotation=whole)["entity_token_map"]
    assert "'unknown' [13, 20) cuts through the word 'unknownia': widened to [13, 22)" in caplog.text
    assert processor.alignment_report()["widened_mentions"] == 2
    rows = processor.prepare_ner_features({"tokens": [TEXT.split()], "knowledge": [cut]}, label_column=None)
    assert rows["entity_token_map"][0] == from_cut["entity_token_map"]
    assert processor.alignment_report() == {
        "widened_mentions": 4,
        "widened_examples": ["'unknown' [13, 20) -> 'unknownia' [13, 22)", "'ari' [28, 31) -> 'paris' [27, 32)"],
    }


def test_text_written_without_spaces_is_not_widened():
    """In a script written without spaces a mention needs no word boundary (the linker's rule): nothing to widen."""
    text = "我住在巴黎市中心"
    annotation = KnowledgeAnnotation.from_dict({"entities": [{"text": "巴黎", "start": 3, "end": 5, "id": "Q90"}]})
    assert annotation.widened_to_words(text)[1] == 0


def test_an_mlm_or_relation_label_outside_the_vocabulary_is_a_value_error_naming_the_id(tokenizer, kg):
    """TRELM's MLM and CKA targets are token ids of the vocabulary; relation extraction's edge labels relation ids:
    an id outside is a ValueError naming it (-100 ignored), not an index error deep in torch."""
    from keplm.modeling import KeplmForRelationExtraction

    from .test_relation_extraction import tiny_model
    from .test_trelm import make_model as make_trelm
    from .test_trelm import with_kge

    assets = with_kge(kg)
    trelm = make_trelm(tokenizer, assets).train()
    inputs = TrelmProcessor(tokenizer, assets)("john visited paris in france .", return_tensors="pt")
    labels = torch.full_like(inputs["input_ids"], -100)
    labels[0, 2] = len(tokenizer) + 3
    for mode in (trelm.train, trelm.eval):
        mode()
        with pytest.raises(ValueError, match=rf"labels hold id {len(tokenizer) + 3} outside \[0, {len(tokenizer)}\)"):
            trelm(**inputs, labels=labels)
    labels[0, 2] = 5
    cka = torch.full_like(labels, -100)
    cka[0, 3] = -7
    with pytest.raises(ValueError, match=r"cka_labels hold id -7 outside"):
        trelm.train()(**inputs, labels=labels, cka_labels=cka)

    model: KeplmForRelationExtraction = tiny_model(tokenizer)
    batch = {
        "input_ids": torch.tensor([[2, 30, 31, 3]]),
        "attention_mask": torch.ones(1, 4, dtype=torch.long),
        "entity_token_map": torch.tensor([[-1, 0, 1, -1]]),
        "node_entity_ids": torch.zeros(2, dtype=torch.long),
        "edge_index": torch.tensor([[0], [1]]),
    }
    with pytest.raises(ValueError, match=rf"edge_labels hold id 99 outside \[0, {model.config.num_labels}\)"):
        model(**batch, edge_labels=torch.tensor([99]))


def test_facts_naming_a_relation_the_kg_lacks_are_counted_and_reported(tokenizer, assets, caplog):
    """Annotation facts whose relation is not in the KG are read as the unknown relation: counted (with examples)
    in the coverage report the run scripts write to their results, and logged, not silently mapped."""
    knowledge = [
        {
            "entities": [{"text": "paris", "start": 0, "end": 5, "id": "Q90"}],
            "triplets": [
                {"h": "Q90", "r": "P17", "t": "Q142"},
                {"h": "Q90", "r": "P-typo", "t": "Q142"},
                {"h": "Q90", "r": "P-typo", "t": "Q515"},
            ],
        }
    ]
    processor = KalaProcessor(tokenizer, assets)
    with caplog.at_level(logging.WARNING, logger="keplm.tokenization.processing_kala"):
        report = processor.entity_coverage(knowledge)
    assert report["fact_relations"] == {
        "total": 3,
        "unknown": 2,
        "outside_vocabulary": 2,
        "unknown_examples": ["P-typo"],
    }
    assert "2 of 3 facts have a relation that is not in the knowledge graph (e.g. ['P-typo'])" in caplog.text
    from keplm.training.runtime import flatten

    assert flatten(report, "test_entities")["test_entities_fact_relations_unknown"] == 2
    graph = processor("paris", annotation=knowledge[0])
    assert sorted(set(graph["edge_relation_ids"]) & {1}) == [1]  # the unknown relation's row, as counted


def test_every_processor_call_with_return_tensors_feeds_its_model(tokenizer, kg, assets):
    """``model(**processor(text, return_tensors="pt"))`` for TRELM reads the text's knowledge (entity rows and the
    injection mask of its mentions, as pre-training features give them), and relation extraction's processor takes
    ``return_tensors`` too."""
    from keplm import RelationExtractionProcessor

    from .test_relation_extraction import LABEL2ID, tiny_model
    from .test_trelm import make_model as make_trelm
    from .test_trelm import with_kge

    trelm_assets = with_kge(kg)
    processor = TrelmProcessor(tokenizer, trelm_assets)
    text = "john visited paris in france ."
    inputs = processor(text, return_tensors="pt")
    expected = processor.prepare_pretraining_features({"text": [text]}, knowledge_targets=False)
    for key in ("entity_ids", "mention_token_map", "inject_mask"):
        assert inputs[key].tolist() == [expected[key][0]], key
    assert int(inputs["inject_mask"].sum()) > 0
    model = make_trelm(tokenizer, trelm_assets).eval()
    with torch.no_grad():
        assert model(**inputs).logits.shape[:2] == inputs["input_ids"].shape

    re_processor = RelationExtractionProcessor(tokenizer, label2id=LABEL2ID)
    re_inputs = re_processor("john visited paris .", entity_spans=[[[0, 4]], [[13, 18]]], return_tensors="pt")
    assert re_inputs["input_ids"].dim() == 2 and re_inputs["edge_index"].shape[0] == 2
    with torch.no_grad():
        assert tiny_model(tokenizer)(**re_inputs).logits.shape[0] == re_inputs["edge_index"].shape[1]

    kala = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3)
    kala_processor = KalaProcessor(tokenizer, assets)
    batch = KeplmDataCollator.from_processor(kala_processor, kala)([kala_processor(text)])
    with torch.no_grad():
        torch.testing.assert_close(kala(**kala_processor(text, return_tensors="pt")).logits, kala(**batch).logits)
