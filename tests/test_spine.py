"""The spine every keplm model is built on: the processor base without a graph, AutoProcessor, the collator's
sequence families, and a multi-encoder model built with ``from_base_pretrained``."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from transformers import AutoProcessor, BertModel

import keplm  # noqa: F401  (registers the Auto classes)
from keplm import KalaConfig, KalaForTokenClassification, KalaProcessor, KeplmProcessor
from keplm.configuration import KeplmConfig
from keplm.configuration.base import encoder_subconfigs
from keplm.data.collator import KeplmDataCollator
from keplm.file_utils import PROCESSOR_CONFIG_NAME
from keplm.knowledge import KnowledgeAnnotation, KnowledgeAssets
from keplm.modeling.base import ExtraLayers, KeplmPreTrainedModel, encoder_layers
from keplm.tokenization.schema import GraphSchema

from .conftest import tiny_encoder_config

CONTEXT = "john lives in new york . mary visited berlin and paris . the seine flows through paris ."


# ---------------------------------------------------------------------------------------------- processor base
def test_processor_base_without_graph_aligns_labels_spans_and_windows(tokenizer, kg):
    """The base processor makes no knowledge inputs of its own, yet aligns NER labels to first sub-tokens, maps
    character spans to token spans, and cuts QA contexts into stride windows with answer positions."""
    processor = KeplmProcessor(tokenizer, KnowledgeAssets(kg=kg))
    ner = processor.prepare_ner_features(
        {"tokens": [["rivers", "is", "a", "city"]], "ner_tags": [[1, 0, 0, 2]]}, annotation_column=None
    )
    assert set(ner) == {"input_ids", "token_type_ids", "attention_mask", "labels"}  # no graph, no token map
    tokens = tokenizer.convert_ids_to_tokens(ner["input_ids"][0])
    assert tokens == ["[CLS]", "river", "##s", "is", "a", "city", "[SEP]"]
    assert ner["labels"][0] == [-100, 1, -100, 0, 0, 2, -100]  # the second sub-token of a word is not scored

    encoding = tokenizer(CONTEXT, return_offsets_mapping=True)
    annotation = processor.link(CONTEXT)
    spans = processor.mention_spans(
        encoding["offset_mapping"], [[s == 0 for s in encoding.sequence_ids()]], [annotation]
    )
    by_text = {mention.text: (first, last) for first, last, mention in spans}
    first, last = by_text["new york"]
    assert tokenizer.convert_ids_to_tokens(encoding["input_ids"][first : last + 1]) == ["new", "york"]

    start = CONTEXT.index("berlin")
    examples = {
        "id": ["q"],
        "question": ["where did mary go ?"],
        "context": [CONTEXT],
        "answers": [{"text": ["berlin"], "answer_start": [start]}],
    }
    qa = processor.prepare_qa_features(
        examples, max_length=20, doc_stride=6, training=True, annotation_column=None, question_annotation_column=None
    )
    assert len(qa["input_ids"]) > 1  # several windows
    hits = [i for i, (s, e) in enumerate(zip(qa["start_positions"], qa["end_positions"])) if (s, e) != (0, 0)]
    assert hits, "the answer must lie fully inside at least one window"
    for i in hits:
        span = qa["input_ids"][i][qa["start_positions"][i] : qa["end_positions"][i] + 1]
        answer = tokenizer.convert_ids_to_tokens(span)
        assert answer == ["berlin"]
    assert "entity_token_map" not in qa
    windows = processor.prepare_qa_features(
        examples, max_length=20, doc_stride=6, training=False, annotation_column=None, question_annotation_column=None
    )
    assert windows["example_id"] == ["q"] * len(qa["input_ids"])


def test_processor_validates_annotations_of_ner_data(tokenizer, assets):
    """A precomputed NER annotation whose span text disagrees with the sentence is an error, not a silent
    mislink."""
    processor = KalaProcessor(tokenizer, assets)
    bad = KnowledgeAnnotation.from_dict({"entities": [{"text": "berlin", "start": 0, "end": 5, "id": "Q64"}]})
    with pytest.raises(ValueError, match="mention.text"):
        processor.prepare_ner_features(
            {"tokens": [["paris", "is", "a", "city"]], "knowledge": [bad]}, label_column=None
        )


def test_qa_features_check_the_answer_offset_and_the_question_annotation(tokenizer, assets):
    """``prepare_qa_features`` itself checks that ``answer_start`` points at the answer text (data from any source,
    not only the file readers), and validates a question annotation against the question as it does the context's."""
    processor = KalaProcessor(tokenizer, assets)
    examples = {
        "id": ["q1"],
        "question": ["where is paris ?"],
        "context": ["paris is a city in france ."],
        "answers": [{"text": ["france"], "answer_start": [19]}],
    }
    ok = processor.prepare_qa_features(examples, max_length=32, doc_stride=8)
    assert ok["start_positions"][0] > 0
    shifted = {**examples, "answers": [{"text": ["france"], "answer_start": [17]}]}
    with pytest.raises(ValueError, match=r"QA example q1: answer_start 17 does not point at the answer 'france'"):
        processor.prepare_qa_features(shifted, max_length=32, doc_stride=8)
    processor.prepare_qa_features(shifted, max_length=32, doc_stride=8, training=False)  # no labels: not checked
    question = KnowledgeAnnotation.from_dict({"entities": [{"text": "paris", "start": 0, "end": 5, "id": "Q90"}]})
    with pytest.raises(ValueError, match=r"mention 0: text\[0:5\] is 'where' but mention.text is 'paris'"):
        processor.prepare_qa_features({**examples, "question_knowledge": [question]}, max_length=32, doc_stride=8)
    good = KnowledgeAnnotation.from_dict({"entities": [{"text": "paris", "start": 9, "end": 14, "id": "Q90"}]})
    processor.prepare_qa_features({**examples, "question_knowledge": [good]}, max_length=32, doc_stride=8)
    # a question written with leading spaces: its annotation counts in the question as written, and the features
    # are those of the question without them (the processor cuts them), mention included
    spaced = {**examples, "question": ["   where is paris ?"]}
    moved = KnowledgeAnnotation.from_dict({"entities": [{"text": "paris", "start": 12, "end": 17, "id": "Q90"}]})
    features = processor.prepare_qa_features({**spaced, "question_knowledge": [moved]}, max_length=32, doc_stride=8)
    plain = processor.prepare_qa_features({**examples, "question_knowledge": [good]}, max_length=32, doc_stride=8)
    assert features == plain
    generative = processor.prepare_generative_qa_features
    assert generative({**spaced, "question_knowledge": [moved]}) == generative(
        {**examples, "question_knowledge": [good]}
    )


def test_auto_processor_round_trip_and_agreement_checks(tmp_path, tokenizer, assets):
    """``AutoProcessor.from_pretrained`` returns the saved processor class with its KG and settings; a processor and
    a model that disagree are caught where they meet."""
    model = KalaForTokenClassification(
        KalaConfig(
            encoder_config=tiny_encoder_config(tokenizer),
            num_labels=2,
            entity_vocab_size=assets.num_entities,
            num_relations=assets.num_relations,
        )
    )
    model.set_knowledge_assets(assets)
    processor = KalaProcessor(tokenizer, assets, linker_kwargs={"lowercase": True})
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    config = json.loads((tmp_path / PROCESSOR_CONFIG_NAME).read_text())
    assert config["processor_class"] == "KalaProcessor" and config["format_version"] == 1
    loaded = AutoProcessor.from_pretrained(tmp_path)
    assert type(loaded) is KalaProcessor and loaded.linker_kwargs == {"lowercase": True}
    assert loaded.knowledge_assets.content_hash() == assets.content_hash()
    assert loaded.kg.content_hash() == assets.kg.content_hash()
    assert loaded("paris is a city") == processor("paris is a city")
    loaded.check_model(model)

    other = KnowledgeAssets.build(["Q90"], kg=assets.kg)
    with pytest.raises(ValueError, match="differ from the model's"):
        KalaProcessor(tokenizer, other).check_model(model)
    with pytest.raises(ValueError, match="use_inverse_relations"):
        KalaProcessor(tokenizer, assets, use_inverse_relations=False).check_model(model)
    with pytest.raises(ValueError, match="other knowledge assets"):  # would pair the model with wrong assets
        KalaProcessor(tokenizer, other).save_pretrained(tmp_path)
    (tmp_path / PROCESSOR_CONFIG_NAME).write_text(json.dumps({**config, "use_inverse_relations": False}))
    with pytest.raises(ValueError, match="use_inverse_relations"):  # checked against config.json on load
        AutoProcessor.from_pretrained(tmp_path)


def test_processor_saved_before_format_1_still_loads(tmp_path, tokenizer, assets):
    """Checkpoints saved before the processor settings were renamed to processor_config.json load as before."""
    KalaProcessor(tokenizer, assets).save_pretrained(tmp_path)
    config = json.loads((tmp_path / PROCESSOR_CONFIG_NAME).read_text())
    (tmp_path / PROCESSOR_CONFIG_NAME).unlink()
    config.pop("format_version")
    (tmp_path / "keplm_processor_config.json").write_text(json.dumps(config))
    assert type(KeplmProcessor.from_pretrained(tmp_path)) is KalaProcessor
    config["format_version"] = 7
    (tmp_path / PROCESSOR_CONFIG_NAME).write_text(json.dumps(config))
    with pytest.raises(ValueError, match="format_version 7"):
        KeplmProcessor.from_pretrained(tmp_path)


# ---------------------------------------------------------------------------------------------- collator
@pytest.mark.parametrize("side", ["right", "left"])
def test_collator_pads_two_sequence_families_on_either_side(side):
    """Each family is padded to its own longest member on the tokenizer's side, with its own pad values; token
    positions move with left padding; an undeclared token-level field is an error, not a silent drop."""
    families = {
        "input_ids": ("input_ids", "attention_mask", "labels"),
        "knowledge_input_ids": ("knowledge_input_ids", "knowledge_attention_mask"),
    }
    collator = KeplmDataCollator(pad_token_id=9, padding_side=side, sequence_families=families)
    features = [
        {
            "input_ids": [1, 2, 3],
            "attention_mask": [1, 1, 1],
            "labels": [0, 1, 0],
            "knowledge_input_ids": [5],
            "knowledge_attention_mask": [1],
            "start_positions": 2,
            "score": 0.5,
        },
        {
            "input_ids": [1, 2],
            "attention_mask": [1, 1],
            "labels": [1, 1],
            "knowledge_input_ids": [5, 6, 7, 8],
            "knowledge_attention_mask": [1, 1, 1, 1],
            "start_positions": 1,
            "score": 1.5,
        },
    ]
    batch = collator(features)
    assert batch["input_ids"].shape == (2, 3) and batch["knowledge_input_ids"].shape == (2, 4)
    if side == "right":
        assert batch["input_ids"][1].tolist() == [1, 2, 9] and batch["labels"][1].tolist() == [1, 1, -100]
        assert batch["knowledge_input_ids"][0].tolist() == [5, 9, 9, 9]
        assert batch["start_positions"].tolist() == [2, 1]
    else:
        assert batch["input_ids"][1].tolist() == [9, 1, 2] and batch["labels"][1].tolist() == [-100, 1, 1]
        assert batch["knowledge_attention_mask"][0].tolist() == [0, 0, 0, 1]
        assert batch["start_positions"].tolist() == [2, 2]  # the second row moved right by one pad token
    assert batch["score"].dtype == torch.float32 and batch["score"].tolist() == [0.5, 1.5]
    with pytest.raises(ValueError, match="knowledge_token_type_ids"):
        collator([{**features[0], "knowledge_token_type_ids": [0]}])
    with pytest.raises(ValueError, match="no graph"):
        collator([{**features[0], "node_entity_ids": [0], "edge_index": [[], []]}])


def test_collator_batches_a_graph_under_the_names_the_processor_declares():
    """A processor declaring its own graph keys (a :class:`GraphSchema`) gets its graphs batched by the stock
    collator: node indices and the token → node map offset per example, per-edge values concatenated and padded
    (labels with -100), nothing renamed; the same features under another schema are an error, not a silent drop."""

    class ToyProcessor(KeplmProcessor):
        sequence_families = {"input_ids": ("input_ids", "attention_mask", "token_nodes")}
        graph_schema = GraphSchema(
            nodes="node_ids", edges="edges", edge_values=("edge_types", "edge_labels"), node_maps=("token_nodes",)
        )

    from transformers import BertTokenizerFast

    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"])})
    collator = KeplmDataCollator.from_processor(ToyProcessor(tokenizer), graph_pad_to_multiple_of=4)
    assert collator.graph and collator.graph_schema is ToyProcessor.graph_schema
    features = [
        {
            "input_ids": [2, 4, 3],
            "attention_mask": [1, 1, 1],
            "token_nodes": [-1, 1, -1],
            "node_ids": [7, 8],
            "edges": [[0], [1]],
            "edge_types": [3],
            "edge_labels": [1],
        },
        {
            "input_ids": [2, 4, 4, 3],
            "attention_mask": [1, 1, 1, 1],
            "token_nodes": [-1, 0, 2, -1],
            "node_ids": [5, 6, 9],
            "edges": [[2, 0], [0, 1]],
            "edge_types": [4, 5],
            "edge_labels": [0, 2],
        },
    ]
    batch = collator(features)
    assert batch["node_ids"].tolist() == [7, 8, 5, 6, 9, 0, 0, 0]  # two graphs, then null nodes up to 8
    assert batch["edges"][:, :3].tolist() == [[0, 4, 2], [1, 2, 3]]  # the second graph's nodes start at 2
    assert batch["edges"].shape == (2, 4) and batch["edges"][:, 3].tolist() == [5, 5]  # a self-edge on a null node
    assert batch["edge_types"].tolist() == [3, 4, 5, 0] and batch["edge_labels"].tolist() == [1, 0, 2, -100]
    assert batch["token_nodes"].tolist() == [[-1, 1, -1, -1], [-1, 2, 4, -1]]
    assert not {"node_entity_ids", "edge_index", "entity_token_map"} & set(batch)
    with pytest.raises(ValueError, match="no node_entity_ids"):
        KeplmDataCollator(graph=True, sequence_families=ToyProcessor.sequence_families)(features)
    with pytest.raises(ValueError, match="2 edges but 1 edge_types"):
        collator([{**features[1], "edge_types": [4]}])
    with pytest.raises(ValueError, match="must be a GraphSchema"):
        KeplmDataCollator(graph_schema=("node_ids", "edges"))


# ---------------------------------------------------------------------------------------------- two encoders
class TwoEncoderConfig(KeplmConfig):
    """A test model with a text encoder, a second encoder and a one-layer top copied from the text encoder."""

    model_type = "keplm_test_two_encoders"
    encoder_names = ("encoder", "knowledge_encoder")
    locals().update(encoder_subconfigs("encoder", "knowledge_encoder"))
    knowledge_encoder_config: dict | None = None


class TwoEncoderModel(KeplmPreTrainedModel):
    config_class = TwoEncoderConfig
    base_model_prefix = "two"

    def __init__(self, config):
        super().__init__(config)
        from keplm.modeling.base import build_encoder

        self.encoder = build_encoder(config.encoder_config)
        self.knowledge_encoder = build_encoder(config.knowledge_encoder_config)
        self.top = ExtraLayers(self.encoder, 1, copy_from="encoder")
        self.head = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(self, input_ids, knowledge_input_ids):
        text = self.encoder(input_ids=input_ids).last_hidden_state
        knowledge = self.knowledge_encoder(input_ids=knowledge_input_ids).last_hidden_state
        return self.head(self.top(torch.cat([text, knowledge], dim=1)))


def test_two_encoders_from_one_checkpoint_have_separate_weights(tmp_path, tokenizer):
    torch.manual_seed(0)
    base = BertModel(tiny_encoder_config(tokenizer))
    base.save_pretrained(tmp_path / "base")
    model = TwoEncoderModel.from_base_pretrained(tmp_path / "base")
    reference = {k: v for k, v in base.state_dict().items() if not k.startswith("pooler.")}
    for name in ("encoder", "knowledge_encoder"):
        loaded = model.named_encoders()[name].state_dict()
        assert all(torch.equal(loaded[k], v) for k, v in reference.items()), name
    last = encoder_layers(base)[-1].state_dict()
    assert all(torch.equal(model.top[0].state_dict()[k], v) for k, v in last.items())  # the roof-style copy
    assert model.loading_report["newly_initialized"] == ["head"]
    assert model.loading_report["copied_from_encoder_layers"] == ["top"]
    with torch.no_grad():
        model.encoder.embeddings.word_embeddings.weight.add_(1.0)
    assert not torch.equal(
        model.encoder.embeddings.word_embeddings.weight, model.knowledge_encoder.embeddings.word_embeddings.weight
    )  # separate copies
    assert model.config.knowledge_encoder_config.hidden_size == model.config.encoder_config.hidden_size
    model.save_pretrained(tmp_path / "saved")
    reloaded = TwoEncoderModel.from_pretrained(tmp_path / "saved")
    ids = torch.tensor([[2, 10, 11, 3]])
    knowledge_ids = torch.tensor([[2, 12, 3]])
    torch.testing.assert_close(reloaded.eval()(ids, knowledge_ids), model.eval()(ids, knowledge_ids))
    with pytest.raises(ValueError, match="base checkpoints must be given"):
        TwoEncoderModel.from_base_pretrained({"encoder": tmp_path / "base"})


def test_from_base_pretrained_returns_an_eval_mode_model_as_from_pretrained_does(tmp_path, tokenizer, assets):
    BertModel(tiny_encoder_config(tokenizer)).save_pretrained(tmp_path / "base")
    model = KalaForTokenClassification.from_base_pretrained(tmp_path / "base", knowledge_assets=assets, num_labels=3)
    assert not model.training and not any(module.training for module in model.modules())


@pytest.mark.parametrize("side", ["right", "left"])
def test_a_sentences_logits_do_not_depend_on_its_batch_on_either_padding_side(side, tokenizer, assets):
    """Padded = single on both sides: with left padding the collator numbers positions from each row's first token
    (BERT's absolute position embeddings would otherwise shift); a model that takes no position_ids is refused
    left padding rather than silently shifted."""
    from transformers import BertTokenizerFast

    from .test_kala_model import make_model

    left = BertTokenizerFast(vocab=tokenizer.get_vocab(), do_lower_case=True, padding_side=side)
    model = make_model(KalaForTokenClassification, left, assets, num_labels=3)
    processor = KalaProcessor(left, assets)
    collator = KeplmDataCollator.from_processor(processor, model)
    assert collator.position_ids == (side == "left")
    short, long = processor("john visited paris ."), processor("mary lives in berlin and john visited paris .")
    with torch.no_grad():
        alone = model(**collator([short])).logits[0]
        batch = collator([short, long])
        together = model(**batch).logits[0]
    offset = batch["input_ids"].shape[1] - len(short["input_ids"]) if side == "left" else 0
    torch.testing.assert_close(together[offset : offset + len(short["input_ids"])], alone, rtol=1e-4, atol=1e-5)

    class NoPositions(nn.Module):
        config = model.config

        def forward(self, input_ids, attention_mask):
            return input_ids

    if side == "left":
        with pytest.raises(ValueError, match="takes no position_ids: left padding would shift"):
            KeplmDataCollator.from_processor(processor, NoPositions())


def test_processor_call_with_return_tensors_feeds_the_model_as_the_collator_would(tokenizer, assets, kg):
    """The HF processor convention: ``model(**processor(text, return_tensors="pt"))`` runs, with the same inputs
    (and logits) as the collator's batch of that one example, for a graph-reading model (KALA, one graph of the
    text's facts, none when nothing links) and for Roof-Transformer's second sequence family."""
    from keplm import RoofTransformerConfig, RoofTransformerForSequenceClassification, RoofTransformerProcessor

    from .test_kala_model import make_model

    model = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3)
    processor = KalaProcessor(tokenizer, assets)
    collator = KeplmDataCollator.from_processor(processor, model)
    for text in ("john visited paris in france .", "nothing here links"):
        inputs = processor(text, return_tensors="pt")
        batch = collator([processor(text)])
        assert inputs.keys() == batch.keys()
        for key in inputs:
            torch.testing.assert_close(inputs[key], batch[key], msg=key)
        with torch.no_grad():
            torch.testing.assert_close(model(**inputs).logits, model(**batch).logits)
    assert processor("john visited paris .", return_tensors="pt")["edge_index"].shape[0] == 2
    with pytest.raises(ValueError, match="return_tensors must be None or 'pt'"):
        processor("paris", return_tensors="np")

    roof_processor = RoofTransformerProcessor(tokenizer, KnowledgeAssets(kg=kg), max_knowledge_length=40)
    roof = RoofTransformerForSequenceClassification(
        RoofTransformerConfig(
            encoder_config=tiny_encoder_config(tokenizer), max_knowledge_length=40, fusion_layers=1, num_labels=2
        )
    ).eval()
    inputs = roof_processor("paris is a city in france .", return_tensors="pt")
    assert inputs["knowledge_input_ids"].dim() == 2 and inputs["input_ids"].shape[0] == 1
    with torch.no_grad():
        assert roof(**inputs).logits.shape == (1, 2)
