"""Raw text in one call: the keplm-ner and keplm-qa pipelines on tiny saved models (and from a Hub repo)."""

from __future__ import annotations

import pytest
import torch
from transformers import pipeline

import keplm  # noqa: F401  (registers the pipelines)
from keplm import KalaForQuestionAnswering, KalaForTokenClassification, KalaProcessor
from keplm.training.tagging import tag_words

from .test_kala_model import make_model

LABELS = {0: "O", 1: "B-LOC", 2: "I-LOC"}
TEXTS = ["john visited paris and new york .", "berlin is a city in germany", "mary works for acme bank ."]
CONTEXT = (
    "paris is the capital of france . the seine flows through paris . john lives in paris and works for acme "
    "bank . berlin is the capital of germany . mary visited berlin and london ."
)


@pytest.fixture()
def ner_dir(tmp_path, tokenizer, assets):
    model = make_model(
        KalaForTokenClassification,
        tokenizer,
        assets,
        "relational",
        num_labels=3,
        id2label=LABELS,
        label2id={v: k for k, v in LABELS.items()},
    )
    with torch.no_grad():  # entity-like words (mentions) lean to B-LOC, the rest to O: a tagger with both tags
        model.classifier.bias.copy_(torch.tensor([0.5, 0.0, -1.0]))
    model.save_pretrained(tmp_path / "ner")
    KalaProcessor(tokenizer, assets).save_pretrained(tmp_path / "ner")
    return tmp_path / "ner"


@pytest.fixture()
def qa_dir(tmp_path, tokenizer, assets):
    model = make_model(KalaForQuestionAnswering, tokenizer, assets, "relational")
    model.save_pretrained(tmp_path / "qa")
    KalaProcessor(tokenizer, assets).save_pretrained(tmp_path / "qa")
    return tmp_path / "qa"


def test_ner_pipeline_tags_raw_text_with_offsets_and_batches_like_singles(ner_dir):
    tagger = pipeline("keplm-ner", model=str(ner_dir))
    singles = [tagger(text) for text in TEXTS]
    batched = tagger(TEXTS, batch_size=2)  # batching changes nothing but float rounding of the scores
    assert [[{k: v for k, v in g.items() if k != "score"} for g in groups] for groups in batched] == [
        [{k: v for k, v in g.items() if k != "score"} for g in groups] for groups in singles
    ]
    for text, groups in zip(TEXTS, singles):
        for group in groups:
            assert text[group["start"] : group["end"]] == group["word"] and 0 < group["score"] <= 1
            assert group["entity_group"] == "LOC"
    words = tagger(TEXTS[0], aggregation_strategy="none")
    by_word = {w["word"]: w["entity"] for w in words}
    expected = {word: tag for word, tag in tag_words(tagger.model, tagger.processor, TEXTS[0]) if tag != "O"}
    assert by_word == expected  # the same word tags as run_ner's --tag_text helper
    assert any(singles), "the tiny tagger should find at least one entity"


def test_qa_pipeline_answers_from_stride_windows_and_batches_like_singles(qa_dir):
    reader = pipeline("keplm-qa", model=str(qa_dir), max_length=24, doc_stride=8)
    questions = ["what is the capital of france ?", "who visited berlin ?"]
    singles = [reader(question=q, context=CONTEXT) for q in questions]
    batched = reader([{"question": q, "context": CONTEXT} for q in questions], batch_size=3)
    for one, many in zip(singles, batched):  # padding in a batch moves scores by float rounding only
        assert {k: v for k, v in one.items() if k != "score"} == {k: v for k, v in many.items() if k != "score"}
        assert one["score"] == pytest.approx(many["score"], rel=1e-5)
    for answer in singles:
        assert CONTEXT[answer["start"] : answer["end"]] == answer["answer"] and 0 < answer["score"] <= 1
    top = reader(question=questions[0], context=CONTEXT, top_k=3)
    assert len(top) == 3 and top[0] == singles[0] and top[0]["score"] >= top[1]["score"] >= top[2]["score"]
    with pytest.raises(ValueError, match="question"):
        reader("no context given")


def test_pipeline_from_a_hub_repo(hub_server, ner_dir):
    from huggingface_hub import HfApi

    HfApi().create_repo("org/ner-pipe")
    HfApi().upload_folder(repo_id="org/ner-pipe", folder_path=ner_dir)
    local = pipeline("keplm-ner", model=str(ner_dir))(TEXTS[0])
    assert pipeline("keplm-ner", model="org/ner-pipe")(TEXTS[0]) == local


# ------------------------------------------------------------------------------------------------ Roof-Transformer
def _roof_dir(path, tokenizer, kg, cls, **config):
    from keplm import RoofTransformerConfig, RoofTransformerProcessor
    from keplm.knowledge import KnowledgeAssets

    from .conftest import tiny_encoder_config

    torch.manual_seed(0)
    processor = RoofTransformerProcessor(
        tokenizer, KnowledgeAssets(kg=kg), selection="no_tail", max_knowledge_length=40
    )
    model = cls(
        RoofTransformerConfig(
            encoder_config=tiny_encoder_config(tokenizer), max_knowledge_length=40, fusion_layers=1, **config
        )
    )
    model.set_knowledge_assets(processor.knowledge_assets)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def test_text_classification_pipeline_with_roof_matches_the_model(tmp_path, tokenizer, kg):
    """Roof-Transformer through keplm-text-classification: the texts are linked, knowledge selected from both
    sentences, and the label / score are the model's own softmax over the processor's features."""
    from keplm import RoofTransformerForSequenceClassification
    from keplm.data.collator import KeplmDataCollator

    labels = {0: "entailment", 1: "not_entailment"}
    path = _roof_dir(
        tmp_path / "roof-cls",
        tokenizer,
        kg,
        RoofTransformerForSequenceClassification,
        num_labels=2,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    classify = pipeline("keplm-text-classification", model=str(path))
    pairs = [
        {"text": "paris is a city in france .", "text_pair": "the seine flows through paris ."},
        {"text": "mary works for acme bank .", "text_pair": "who works ?"},
    ]
    singles = [classify(pair) for pair in pairs]
    batched = classify(pairs, batch_size=2)
    for one, many in zip(singles, batched):
        assert one["label"] == many["label"] and one["score"] == pytest.approx(many["score"], rel=1e-5)
    features = classify.processor.prepare_pair_features(
        {"sentence1": [pairs[0]["text"]], "sentence2": [pairs[0]["text_pair"]]}, label_column=None, max_length=512
    )
    assert features["num_selected_triples"][0] > 0  # the pipeline's input carries knowledge
    batch = KeplmDataCollator.from_processor(classify.processor, classify.model)(
        [{k: v[0] for k, v in features.items() if not k.startswith("num_")}]
    )
    with torch.no_grad():
        probabilities = classify.model(**batch).logits.softmax(-1)[0]
    assert singles[0] == {
        "label": labels[int(probabilities.argmax())],
        "score": pytest.approx(float(probabilities.max()), rel=1e-5),
    }
    every = classify("berlin is in germany .", top_k=None)
    assert [c["label"] for c in every] != [] and sum(c["score"] for c in every) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="text_pair"):
        classify({"premise": "x"})


def test_qa_pipeline_with_roof_answers_from_the_context(tmp_path, tokenizer, kg):
    from keplm import RoofTransformerForQuestionAnswering

    path = _roof_dir(tmp_path / "roof-qa", tokenizer, kg, RoofTransformerForQuestionAnswering)
    reader = pipeline("keplm-qa", model=str(path), max_length=24, doc_stride=8)
    questions = ["what is the capital of france ?", "who visited berlin ?"]
    singles = [reader(question=q, context=CONTEXT) for q in questions]
    batched = reader([{"question": q, "context": CONTEXT} for q in questions], batch_size=3)
    for one, many in zip(singles, batched):
        assert {k: v for k, v in one.items() if k != "score"} == {k: v for k, v in many.items() if k != "score"}
    for answer in singles:
        assert CONTEXT[answer["start"] : answer["end"]] == answer["answer"] and 0 < answer["score"] <= 1


def test_pipeline_reads_the_saved_kg_once(ner_dir, monkeypatch, assets):
    """The processor takes the model's already loaded knowledge assets when the folder's hashes are theirs; other
    assets are never taken for the saved ones."""
    from keplm.knowledge import KnowledgeAssets, KnowledgeGraph

    reads = []
    original = KnowledgeGraph.from_pretrained.__func__
    monkeypatch.setattr(
        KnowledgeGraph, "from_pretrained", classmethod(lambda cls, *a, **k: reads.append(a) or original(cls, *a, **k))
    )
    tagger = pipeline("keplm-ner", model=str(ner_dir))
    assert len(reads) == 1 and tagger.processor.knowledge_assets is tagger.model.knowledge_assets
    other = KnowledgeAssets(assets.entity_vocab[:-1], assets.relation_vocab, assets.entity_counts[:-1], assets.kg)
    loaded = KnowledgeAssets.from_pretrained(ner_dir, reuse=other)
    assert loaded is not other and loaded.content_hash() == assets.content_hash() and len(reads) == 2


def test_qa_answers_are_whole_words_and_merged_when_they_become_the_same():
    """A span cutting a word gives the whole word ("Merkel", not "kel"); two spans that widen to the same words are
    one answer with their probabilities summed; an empty answer stays empty."""
    from keplm.pipelines import whole_word_answers

    context = "Angela Merkel met Macron in Paris."
    candidates = [
        {"start": 10, "end": 13, "probability": 0.4},  # "kel"
        {"start": 29, "end": 33, "probability": 0.35},  # "aris"
        {"start": 7, "end": 13, "probability": 0.2},  # "Merkel"
        {"start": 0, "end": 0, "probability": 0.05},
    ]
    answers = whole_word_answers(context, candidates)
    assert [(a["answer"], a["start"], a["end"]) for a in answers] == [("Merkel", 7, 13), ("Paris", 28, 33), ("", 0, 0)]
    assert [a["score"] for a in answers] == pytest.approx([0.6, 0.35, 0.05])
    assert whole_word_answers("東京に行った", [{"start": 0, "end": 2, "probability": 1.0}])[0]["answer"] == "東京"


def test_default_max_length_fits_the_models_positions_and_a_larger_one_is_refused(ner_dir, qa_dir):
    """The tiny encoders read 128 positions: the NER and QA pipelines' defaults (512, 384 tokens) are cut to them, so a
    long text is tagged or answered instead of failing deep in the embeddings; an explicit larger max_length is a
    ValueError naming both numbers."""
    long_text = " ".join(["john visited paris ."] * 60)  # about 240 tokens
    ner = pipeline("keplm-ner", model=str(ner_dir))
    assert isinstance(ner(long_text), list)
    with pytest.raises(ValueError, match=r"max_length=512 exceeds the 128 positions"):
        ner(long_text, max_length=512)
    qa = pipeline("keplm-qa", model=str(qa_dir))
    answer = qa(question="who visited paris ?", context=long_text)
    assert set(answer) >= {"answer", "score"}


def test_a_stock_pipeline_on_a_knowledge_model_points_to_the_keplm_pipelines(ner_dir):
    """The card's ``pipeline_tag`` names a stock task (what Hub widgets use); the stock pipeline passes text inputs
    only, and the model's error says which keplm pipeline builds the knowledge inputs from raw text."""
    tagger = pipeline("token-classification", model=str(ner_dir))
    with pytest.raises(ValueError, match=r"use the keplm pipelines.*pipeline\('keplm-ner'"):
        tagger("john visited paris")
