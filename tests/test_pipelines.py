"""Raw text in one call: the keplm-ner and keplm-qa pipelines on tiny saved models (and from a Hub repo)."""

from __future__ import annotations

import pytest
import torch
from transformers import pipeline

import keplm  # noqa: F401  (registers the pipelines)
from keplm import KalaForQuestionAnswering, KalaForTokenClassification, KalaProcessor
from keplm.data.collator import KeplmDataCollator
from keplm.pipelines import word_windows

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


def _first_token_tags(tagger, words: list[str]) -> list[str]:
    """Each word's tag by hand: the model's argmax at the word's first sub-token, on the processor's features."""
    features = tagger.processor.prepare_ner_features(
        {"tokens": [words]}, label_column=None, annotation_column=None, max_length=128
    )
    batch = KeplmDataCollator.from_processor(tagger.processor, tagger.model)([{k: v[0] for k, v in features.items()}])
    with torch.no_grad():
        logits = tagger.model(**batch).logits[0]
    word_ids = tagger.tokenizer(words, is_split_into_words=True).word_ids()
    first = {word: i for i, word in reversed(list(enumerate(word_ids))) if word is not None}
    return [tagger.model.config.id2label[int(logits[first[w]].argmax())] for w in range(len(words))]


def _iob_groups(words: list[str], tags: list[str]) -> list[tuple[str, str]]:
    """Entity groups from IOB2 word tags, by hand: an I- word continues the group of the word before it."""
    groups, previous = [], "O"
    for word, tag in zip(words, tags):
        if tag != "O":
            if tag.startswith("I-") and previous[2:] == tag[2:]:
                groups[-1] = (f"{groups[-1][0]} {word}", tag[2:])
            else:
                groups.append((word, tag[2:]))
        previous = tag
    return groups


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
        # each word tagged from its first sub-token (as keplm trains NER), then grouped: the stock "first" strategy
        expected = _iob_groups(text.split(), _first_token_tags(tagger, text.split()))
        assert [(g["word"], g["entity_group"]) for g in groups] == expected
    assert any(singles), "the tiny tagger should find at least one entity"
    tokens = tagger(TEXTS[0], aggregation_strategy="none")  # the stock pipeline's per-token output
    assert tokens and all({"entity", "score", "index", "word", "start", "end"} <= set(t) for t in tokens)
    words = ["john", "visited", "paris"]
    assert tagger(words, is_split_into_words=True) == [tagger(" ".join(words))]  # a list, as the stock pipeline
    with pytest.raises(ValueError, match="aggregation_strategy must be one of"):
        tagger(TEXTS[0], aggregation_strategy="firstt")


def _no_score(entities: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if k != "score"} for e in entities]


def test_word_windows_hold_whole_words_within_the_budget():
    """Windows by hand: sub-token counts 2, 1, 3, 1, 1 of five words; a word longer than the budget stands alone."""
    word_ids = [0, 0, 1, 2, 2, 2, 3, 4]
    assert word_windows(word_ids, 5, budget=4) == [(0, 2), (2, 4), (4, 5)]
    assert word_windows(word_ids, 5, budget=4, stride=1) == [(0, 2), (1, 3), (3, 5)]
    assert word_windows(word_ids, 5, budget=8) == [(0, 5)]
    assert word_windows([0, 0, 0, 0, 0, 1], 2, budget=4) == [(0, 1), (1, 2)]
    assert word_windows([], 1, budget=4) == [(0, 1)]  # a word without sub-tokens


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


def _roof_logits(classify, pair: dict) -> torch.Tensor:
    """The model's logits for a text pair by hand, on the processor's features (which carry selected triples)."""
    features = classify.processor.prepare_pair_features(
        {"sentence1": [pair["text"]], "sentence2": [pair["text_pair"]]}, label_column=None, max_length=512
    )
    assert features["num_selected_triples"][0] > 0  # the pipeline's input carries knowledge
    batch = KeplmDataCollator.from_processor(classify.processor, classify.model)(
        [{k: v[0] for k, v in features.items() if not k.startswith("num_")}]
    )
    with torch.no_grad():
        return classify.model(**batch).logits[0]


def test_text_classification_pipeline_with_roof_matches_the_model(tmp_path, tokenizer, kg):
    """Roof-Transformer through keplm-text-classification: the texts are linked, knowledge selected from both
    sentences, and the label / score are the model's own softmax over the processor's features."""
    from keplm import RoofTransformerForSequenceClassification

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
    probabilities = _roof_logits(classify, pairs[0]).softmax(-1)
    assert singles[0] == {
        "label": labels[int(probabilities.argmax())],
        "score": pytest.approx(float(probabilities.max()), rel=1e-5),
    }
    one = classify("berlin is in germany .")  # a string: a one-item list, as transformers' text-classification
    assert isinstance(one, list) and len(one) == 1 and one[0]["label"] in labels.values()
    every = classify("berlin is in germany .", top_k=None)
    assert [c["label"] for c in every] != [] and sum(c["score"] for c in every) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="text_pair"):
        classify({"premise": "x"})


def test_text_classification_pipeline_returns_a_regression_models_raw_score(tmp_path, tokenizer, kg):
    """A regression model (one label, STS-B) gets the stock pipeline's regression output: its raw logit as the score."""
    from keplm import RoofTransformerForSequenceClassification

    path = _roof_dir(
        tmp_path / "roof-reg",
        tokenizer,
        kg,
        RoofTransformerForSequenceClassification,
        num_labels=1,
        problem_type="regression",
    )
    score = pipeline("keplm-text-classification", model=str(path))
    pair = {"text": "paris is a city in france .", "text_pair": "the seine flows through paris ."}
    assert score(pair)["score"] == pytest.approx(float(_roof_logits(score, pair)[0]), rel=1e-5)


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
    # read in two windows of whole words (126 tokens and the rest): each window's entities are those of its words
    # tagged alone, so the text is tagged to its end
    words = long_text.split()
    split = word_windows(ner.tokenizer(words, is_split_into_words=True, add_special_tokens=False).word_ids(), 240, 126)
    assert len(split) == 2
    cut = len(" ".join(words[: split[0][1]])) + 1
    second = [{**e, "start": e["start"] + cut, "end": e["end"] + cut} for e in ner(long_text[cut:])]
    assert _no_score(ner(long_text)) == _no_score(ner(long_text[: cut - 1]) + second)
    assert max(e["end"] for e in second) > len(long_text) - 30
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


def test_a_pipeline_on_a_model_loaded_at_an_old_revision_takes_that_revisions_processor(hub_server, ner_dir):
    """The model records the commit it was read at (``source_revision``), and the pipeline loads the processor from
    that commit: here the later commit has no processor files, so the branch's head would fail."""
    from huggingface_hub import HfApi
    from transformers import AutoModelForTokenClassification

    api = HfApi()
    api.create_repo("org/ner-pipe-revision")
    first = api.upload_folder(repo_id="org/ner-pipe-revision", folder_path=ner_dir)
    api.delete_file("processor_config.json", repo_id="org/ner-pipe-revision")
    model = AutoModelForTokenClassification.from_pretrained("org/ner-pipe-revision", revision=first.oid)
    assert model.source_revision == first.oid
    assert AutoModelForTokenClassification.from_pretrained(str(ner_dir)).source_revision is None
    local = pipeline("keplm-ner", model=str(ner_dir))(TEXTS[0])
    assert pipeline("keplm-ner", model=model)(TEXTS[0]) == local
