"""Issue 24, linking and featurising: mention spans that cut through a word (docs/reliability.md, Round 3)."""

from __future__ import annotations

import logging

import pytest

from keplm import KalaProcessor, KnowledgeAnnotation

pytestmark = pytest.mark.usefixtures("single_thread")  # tests/conftest.py

TEXT = "john visited unknownia and paris ."  # the tokenizer splits "unknownia" into "unknown" "##ia"


def test_a_mention_that_cuts_through_a_word_is_widened_to_the_word_with_a_warning_and_a_count(tokenizer, assets,
                                                                                             caplog):
    """A given mention whose offsets cut a word ("unknown" of "unknownia", "ari" of "paris") covers the whole word
    in the features, as the same mention given on the word would; the processor warns and counts each widening
    (``alignment_report``); a mention on word boundaries is kept as it is."""
    cut = {"entities": [{"text": "unknown", "start": 13, "end": 20, "id": "Q999"},
                        {"text": "ari", "start": 28, "end": 31, "id": "Q90"}], "triplets": []}
    whole = {"entities": [{"text": "unknownia", "start": 13, "end": 22, "id": "Q999"},
                          {"text": "paris", "start": 27, "end": 32, "id": "Q90"}], "triplets": []}
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
    assert processor.alignment_report() == {"widened_mentions": 4, "widened_examples": [
        "'unknown' [13, 20) -> 'unknownia' [13, 22)", "'ari' [28, 31) -> 'paris' [27, 32)"]}


def test_text_written_without_spaces_is_not_widened():
    """In a script written without spaces a mention needs no word boundary (the linker's rule): nothing to widen."""
    text = "我住在巴黎市中心"
    annotation = KnowledgeAnnotation.from_dict({"entities": [{"text": "巴黎", "start": 3, "end": 5, "id": "Q90"}]})
    assert annotation.widened_to_words(text)[1] == 0
