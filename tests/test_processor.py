"""KalaProcessor: mention alignment, NER labels, QA stride windows, linking fallback."""

from __future__ import annotations

import pytest

from keplm.knowledge import KnowledgeAnnotation
from keplm.tokenization import char_spans_to_token_spans


def mention_tokens(features, tokenizer):
    """node -> list of token strings carrying it."""
    tokens = tokenizer.convert_ids_to_tokens(features["input_ids"])
    groups = {}
    for token, node in zip(tokens, features["entity_token_map"]):
        if node >= 0:
            groups.setdefault(node, []).append(token)
    return groups


def test_linking_fallback_builds_mentions_and_graph(processor, tokenizer, assets):
    features = processor("john visited paris and unknownia in france .")
    groups = mention_tokens(features, tokenizer)
    assert sorted(" ".join(g) for g in groups.values()) == ["france", "paris", "unknownia"]
    nodes = features["node_entity_ids"]
    assert 0 in nodes  # unknownia is unseen: a null node, kept in the graph
    assert assets.entity_row("Q515") in nodes  # paris's neighbour "city" joins as a node without mention
    sources, targets = features["edge_index"]
    assert len(sources) == len(features["edge_relation_ids"]) > 0
    assert max(sources + targets) < len(nodes)


def test_same_entity_twice_is_one_node(processor, tokenizer):
    text = "paris is a city and paris is big"
    annotation = KnowledgeAnnotation.from_dict(
        {
            "entities": [
                {"text": "paris", "start": 0, "end": 5, "id": "Q90"},
                {"text": "paris", "start": 20, "end": 25, "id": "Q90"},
            ],
            "triplets": [],
        }
    )
    features = processor(text, annotation=annotation)
    assert features["entity_token_map"].count(0) == 2 and len(features["node_entity_ids"]) == 1


def test_ner_features_align_labels_and_mentions(processor, tokenizer):
    examples = {"tokens": [["John", "visited", "New", "York", "."]], "ner_tags": [[1, 0, 3, 4, 0]]}
    features = processor.prepare_ner_features(examples, annotation_column=None)
    tokens = tokenizer.convert_ids_to_tokens(features["input_ids"][0])
    labels = features["labels"][0]
    assert [t for t, lab in zip(tokens, labels) if lab != -100] == ["john", "visited", "new", "york", "."]
    assert [lab for lab in labels if lab != -100] == [1, 0, 3, 4, 0]
    groups = mention_tokens(
        {"input_ids": features["input_ids"][0], "entity_token_map": features["entity_token_map"][0]}, tokenizer
    )
    assert ["new", "york"] in groups.values()  # multi-token mention linked via the KG name, one node


def test_qa_stride_windows_keep_mentions_aligned(processor, tokenizer, assets):
    sentence = "paris is in france and berlin is in germany and london is in england . "
    context = sentence * 6
    annotation = processor.link(context)
    examples = {
        "id": ["q1"],
        "question": ["where is paris ?"],
        "context": [context],
        "answers": [{"text": ["france"], "answer_start": [12]}],
        "knowledge": [annotation.to_dict()],
    }
    features = processor.prepare_qa_features(examples, max_length=32, doc_stride=8, training=False)
    assert len(features["input_ids"]) > 3
    seen_mentions = set()
    for i, token_map in enumerate(features["entity_token_map"]):
        offsets = features["offset_mapping"][i]
        nodes = features["node_entity_ids"][i]
        for position, node in enumerate(token_map):
            if node < 0 or offsets[position] is None:
                continue
            start, end = offsets[position]
            mention = next(m for m in annotation.entities if m.start <= start and end <= m.end)
            assert nodes[node] == assets.entity_row(mention.id)
            seen_mentions.add(mention.start)
        # every fact edge touches an entity mentioned in this window
        mentioned = {node for node in token_map if node >= 0}
        for source, target in zip(*features["edge_index"][i]):
            assert source in mentioned or target in mentioned
    assert seen_mentions == {m.start for m in annotation.entities}  # every mention lands in some window


def test_qa_training_positions_point_at_the_answer(processor, tokenizer):
    context = "john visited paris and london in england ."
    examples = {
        "id": ["q"],
        "question": ["who visited paris ?"],
        "context": [context],
        "answers": [{"text": ["london"], "answer_start": [context.index("london")]}],
    }
    features = processor.prepare_qa_features(examples, max_length=64, doc_stride=16, annotation_column=None)
    start, end = features["start_positions"][0], features["end_positions"][0]
    assert tokenizer.decode(features["input_ids"][0][start : end + 1]) == "london"


def test_alignment_of_spans_outside_the_window():
    offsets = [(0, 0), (0, 4), (5, 9), (0, 0)]
    assert char_spans_to_token_spans(offsets, [(20, 25)]).tolist() == [[-1, -1]]
    assert char_spans_to_token_spans(offsets, [(5, 9)], [False, True, False, False]).tolist() == [[-1, -1]]


def test_pair_features_read_both_texts_knowledge(processor, tokenizer, assets):
    """The base processor's sentence(-pair) features: one text gives what ``processor(text)`` gives; in a pair the
    second text's mentions are found at its own tokens, and labels come along."""
    text = "john visited paris and unknownia in france ."
    single = processor.prepare_pair_features({"sentence": [text], "label": [1]}, text_columns=("sentence",))
    alone = processor(text)
    assert single["labels"] == [1]
    for key, value in alone.items():
        assert single[key][0] == value, key
    pair = processor.prepare_pair_features(
        {"sentence1": ["the weather is fine ."], "sentence2": [text]}, label_column=None
    )
    assert "labels" not in pair
    groups = mention_tokens(
        {"input_ids": pair["input_ids"][0], "entity_token_map": pair["entity_token_map"][0]}, tokenizer
    )
    assert sorted(" ".join(g) for g in groups.values()) == ["france", "paris", "unknownia"]
    second = pair["token_type_ids"][0]
    assert all(second[i] == 1 for i, node in enumerate(pair["entity_token_map"][0]) if node >= 0)
    plain = processor.prepare_pair_features(
        {"sentence1": ["a ."], "sentence2": [text]}, label_column=None, with_knowledge=False
    )
    assert set(plain) == {"input_ids", "token_type_ids", "attention_mask"}
    with pytest.raises(ValueError, match="no 'label' column"):
        processor.prepare_pair_features({"sentence1": ["a ."], "sentence2": [text]})
    with pytest.raises(ValueError, match="one or two columns"):
        processor.prepare_pair_features({"a": ["x"], "b": ["y"], "c": ["z"]}, text_columns=("a", "b", "c"))


def test_qa_evaluation_offsets_are_the_context_tokens_only(processor, tokenizer):
    """An evaluation feature's ``offset_mapping`` holds character spans on the context tokens and None on the question,
    the special tokens, so no answer can be read from the question (whose offsets index the question)."""
    context = "john visited paris and london in england ."
    examples = {"id": ["q1"], "question": ["where is paris ?"], "context": [context], "answers": [None]}
    features = processor.prepare_qa_features(examples, max_length=32, doc_stride=8, training=False)
    encoding = tokenizer("where is paris ?", context, max_length=32, truncation="only_second")
    sequence = encoding.sequence_ids(0)
    offsets = features["offset_mapping"][0]
    assert [o is not None for o in offsets] == [s == 1 for s in sequence]
    spans = [context[start:end] for start, end in (o for o in offsets if o is not None)]
    assert " ".join(spans) == context
