"""Roof-Transformer's model: heads, the roof variants, QA masking, the cached KB encoder, save/load through the Auto
classes with the KG, the fusion learning rate, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForQuestionAnswering, AutoModelForSequenceClassification, AutoProcessor, BertModel

import keplm  # noqa: F401  (registers the Auto classes)
from keplm import (
    KeplmDataCollator,
    RoofTransformerConfig,
    RoofTransformerForQuestionAnswering,
    RoofTransformerForSequenceClassification,
    RoofTransformerProcessor,
)
from keplm.knowledge import KnowledgeAssets
from keplm.modeling.base import encoder_layers
from keplm.modeling.modeling_roof_transformer import segment_ids

from .conftest import tiny_encoder_config
from .test_mechanisms import bert_layer_by_hand

PAIRS = [
    ("paris is a city in france .", "the seine flows through paris ."),
    ("john visited berlin .", "berlin is in germany ."),
    ("mary works for acme bank .", "who works ?"),
]  # the last pair selects no triple
KNOWLEDGE = 60


def _config(tokenizer, **kwargs) -> RoofTransformerConfig:
    return RoofTransformerConfig(
        encoder_config=tiny_encoder_config(tokenizer), max_knowledge_length=KNOWLEDGE, **{"fusion_layers": 1, **kwargs}
    )


def _processor(tokenizer, kg, **kwargs) -> RoofTransformerProcessor:
    return RoofTransformerProcessor(
        tokenizer, KnowledgeAssets(kg=kg), **{"selection": "no_tail", "max_knowledge_length": KNOWLEDGE, **kwargs}
    )


def _batch(processor, model=None, pairs=PAIRS, labels=(0, 1, 1)):
    features = processor.prepare_pair_features(
        {"sentence1": [a for a, _ in pairs], "sentence2": [b for _, b in pairs], "label": list(labels)}, max_length=40
    )
    rows = [{k: v[i] for k, v in features.items() if not k.startswith("num_")} for i in range(len(pairs))]
    return KeplmDataCollator.from_processor(processor, model)(rows)


@pytest.mark.parametrize("fusion", ["transformer", "transformer_random", "lstm", "linear", "none"])
def test_heads_shapes_and_losses_for_every_roof(tokenizer, kg, fusion):
    torch.manual_seed(0)
    encoding = "none" if fusion == "none" else "joint"
    processor = _processor(tokenizer, kg)
    batch = _batch(processor)
    assert batch["knowledge_input_ids"].shape[0] == 3 and batch["knowledge_attention_mask"][2].sum() == 1
    for num_labels, labels in ((3, batch["labels"]), (1, batch["labels"].float() * 2.5)):
        model = RoofTransformerForSequenceClassification(
            _config(tokenizer, fusion=fusion, knowledge_encoding=encoding, num_labels=num_labels)
        )
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        if fusion == "none":
            inputs = {k: v for k, v in inputs.items() if not k.startswith("knowledge_")}
        out = model(**inputs, labels=labels)
        assert out.logits.shape == (3, num_labels) and out.loss.ndim == 0 and torch.isfinite(out.loss)
        out.loss.backward()


def test_qa_never_answers_from_knowledge_or_padding(tokenizer, kg):
    torch.manual_seed(0)
    model = RoofTransformerForQuestionAnswering(_config(tokenizer)).eval()
    with torch.no_grad():  # push every logit towards late positions: knowledge and padding would win if unmasked
        model.qa_outputs.bias.fill_(5.0)
    processor = _processor(tokenizer, kg)
    batch = _batch(processor)
    text_length = batch["input_ids"].shape[1]
    out = model(**{k: v for k, v in batch.items() if k != "labels"})
    assert out.start_logits.shape == out.end_logits.shape == (3, text_length)  # text positions only
    padding = batch["attention_mask"] == 0
    assert padding.any()
    assert (out.start_logits[padding] == torch.finfo(torch.float32).min).all()
    for logits in (out.start_logits, out.end_logits):
        assert not padding.gather(1, logits.argmax(-1, keepdim=True)).any()


def test_cached_encoding_equals_joint_encoding_for_a_single_triple(tokenizer, kg, tmp_path):
    """With one unit, ``[CLS] unit [SEP]`` alone is exactly the joint input: the cached KB encoder gives the joint
    encoder's states; the cache survives a restart and is invalidated when the KB encoder's weights change."""
    torch.manual_seed(0)
    joint = RoofTransformerForSequenceClassification(_config(tokenizer, num_labels=2)).eval()
    cached = RoofTransformerForSequenceClassification(
        _config(tokenizer, num_labels=2, knowledge_encoding="cached")
    ).eval()
    cached.load_state_dict(joint.state_dict())
    cached.set_knowledge_cache_directory(tmp_path / "cache")
    processor = _processor(tokenizer, kg, selection="has_tail")
    batch = _batch(processor, pairs=[("paris is in france .", "it is a city .")], labels=[0])
    assert batch["knowledge_unit_ids"].max() == 0  # exactly one unit
    inputs = (batch["knowledge_input_ids"], batch["knowledge_attention_mask"])
    with torch.no_grad():
        want = joint.roof._encode_knowledge(*inputs, None)
        got = cached.roof._encode_knowledge(*inputs, batch["knowledge_unit_ids"])
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        inputs_all = {k: v for k, v in batch.items() if k != "labels"}
        torch.testing.assert_close(cached(**inputs_all).logits, joint(**inputs_all).logits, atol=1e-5, rtol=1e-5)
    cache = cached.knowledge_cache
    assert cache.misses == 1 and cache.hits == 1
    cached.save_pretrained(tmp_path / "saved")  # saving flushes the new encodings to disk
    assert list((tmp_path / "cache").rglob("*.safetensors"))
    restarted = RoofTransformerForSequenceClassification(cached.config).eval()
    restarted.load_state_dict(cached.state_dict())
    restarted.set_knowledge_cache_directory(tmp_path / "cache")
    with torch.no_grad():
        restarted.roof._encode_knowledge(*inputs, batch["knowledge_unit_ids"])
        assert restarted.knowledge_cache.misses == 0 and restarted.knowledge_cache.hits == 1
        restarted.roof.knowledge_encoder.embeddings.word_embeddings.weight.add_(0.5)
        changed = restarted.roof._encode_knowledge(*inputs, batch["knowledge_unit_ids"])
    assert restarted.knowledge_cache.misses == 1  # new weights, new key
    assert not torch.allclose(changed, got)
    assert not any(p.requires_grad for p in cached.roof.knowledge_encoder.parameters())


def test_from_base_pretrained_save_load_and_auto_classes(tmp_path, tokenizer, kg):
    torch.manual_seed(0)
    base = BertModel(tiny_encoder_config(tokenizer))
    base.save_pretrained(tmp_path / "base")
    assets = KnowledgeAssets(kg=kg)
    model = RoofTransformerForQuestionAnswering.from_base_pretrained(
        tmp_path / "base", knowledge_assets=assets, fusion_layers=2, max_knowledge_length=KNOWLEDGE
    )
    roof = model.roof
    for name in ("encoder", "knowledge_encoder"):
        loaded = getattr(roof, name).state_dict()
        assert all(torch.equal(loaded[k], v) for k, v in base.state_dict().items() if not k.startswith("pooler."))
    assert (
        roof.encoder.embeddings.word_embeddings.weight.data_ptr()
        != roof.knowledge_encoder.embeddings.word_embeddings.weight.data_ptr()
    )  # separate weights
    for copied, original in zip(roof.fusion.layers, list(encoder_layers(base))[-2:]):
        assert all(torch.equal(copied.state_dict()[k], v) for k, v in original.state_dict().items())
    processor = _processor(tokenizer, kg)
    model.save_pretrained(tmp_path / "saved")
    processor.save_pretrained(tmp_path / "saved")
    loaded = AutoModelForQuestionAnswering.from_pretrained(tmp_path / "saved").eval()
    loaded_processor = AutoProcessor.from_pretrained(tmp_path / "saved")
    assert type(loaded).__name__ == "RoofTransformerForQuestionAnswering"
    assert type(loaded_processor) is RoofTransformerProcessor and loaded_processor.selection == "no_tail"
    batch = {k: v for k, v in _batch(processor).items() if k != "labels"}
    torch.testing.assert_close(loaded(**batch).start_logits, model.eval()(**batch).start_logits)
    classifier = RoofTransformerForSequenceClassification.from_base_pretrained(
        tmp_path / "base", knowledge_assets=assets, max_knowledge_length=KNOWLEDGE, fusion="lstm", num_labels=2
    )
    classifier.save_pretrained(tmp_path / "cls")
    assert (
        type(AutoModelForSequenceClassification.from_pretrained(tmp_path / "cls")).__name__
        == "RoofTransformerForSequenceClassification"
    )


def test_fusion_learning_rate_multiplier_reaches_the_optimizer(tmp_path, tokenizer):
    from transformers import TrainingArguments

    from keplm import KeplmTrainer

    model = RoofTransformerForSequenceClassification(_config(tokenizer, num_labels=2))
    args = TrainingArguments(output_dir=str(tmp_path), learning_rate=2e-5, use_cpu=True, report_to="none")
    trainer = KeplmTrainer(model=model, args=args, parameter_group_options={"fusion_lr_multiplier": 10})
    trainer.create_optimizer()
    lr_of = {id(p): g["lr"] for g in trainer.optimizer.param_groups for p in g["params"]}
    for name, parameter in model.named_parameters():
        assert lr_of[id(parameter)] == pytest.approx(2e-4 if name.startswith("roof.fusion.") else 2e-5), name


def test_segmentation_types_and_long_text_over_two_encoders(tokenizer, kg):
    mask = torch.tensor([[1, 1, 1, 0]])
    types = torch.tensor([[0, 1, 1, 0]])
    assert segment_ids("type2", mask, types, knowledge=True).tolist() == [[0, 0, 0, 0]]
    assert segment_ids("type2", mask, types, knowledge=False).tolist() == [[1, 1, 1, 1]]
    assert segment_ids("type1", mask, types, knowledge=True).tolist() == [[0, 0, 0, 1]]
    assert segment_ids("type1", mask, types, knowledge=False).tolist() == [[0, 1, 1, 0]]
    torch.manual_seed(0)
    model = RoofTransformerForSequenceClassification(_config(tokenizer, num_labels=2, num_text_encoders=2)).eval()
    window = model.config.text_window
    ids = torch.randint(5, len(tokenizer), (1, window + 20))
    knowledge = torch.tensor([[2]])
    out = model(input_ids=ids, knowledge_input_ids=knowledge)
    assert out.logits.shape == (1, 2)
    with pytest.raises(ValueError, match="text encoder"):
        model(input_ids=torch.randint(5, len(tokenizer), (1, 2 * window + 1)), knowledge_input_ids=knowledge)


def test_bad_input_is_a_clear_error(tokenizer, kg):
    model = RoofTransformerForSequenceClassification(_config(tokenizer, num_labels=2))
    ids = torch.tensor([[2, 10, 3]])
    with pytest.raises(ValueError, match="knowledge_input_ids"):
        model(input_ids=ids)
    with pytest.raises(ValueError, match="max_knowledge_length"):
        model(input_ids=ids, knowledge_input_ids=torch.full((1, KNOWLEDGE + 2), 10))
    with pytest.raises(ValueError, match="vocabulary"):
        model(input_ids=torch.tensor([[2, 10_000, 3]]), knowledge_input_ids=torch.tensor([[2]]))
    with pytest.raises(ValueError, match="max_knowledge_length"):
        _processor(tokenizer, kg).__class__(tokenizer, KnowledgeAssets(kg=kg), max_knowledge_length=200).check_config(
            model.config
        )
    with pytest.raises(ValueError, match="fusion"):
        RoofTransformerConfig(encoder_config=tiny_encoder_config(tokenizer), fusion="roofless")


def test_a_transformer_roof_is_copied_from_the_last_layers_of_a_deeper_encoder(tmp_path, tokenizer):
    """Paper 3.2: the roof's k layers are copies of the encoder's last k layers; with a 4-layer encoder and k = 2 the
    roof equals layers 2 and 3 and not layers 0 and 1 (a 2-layer encoder could not tell first from last)."""
    torch.manual_seed(0)
    BertModel(tiny_encoder_config(tokenizer, layers=4)).save_pretrained(tmp_path / "deep")
    base = BertModel.from_pretrained(tmp_path / "deep")
    model = RoofTransformerForSequenceClassification.from_base_pretrained(
        tmp_path / "deep", fusion_layers=2, max_knowledge_length=KNOWLEDGE, num_labels=2
    )
    layers = list(encoder_layers(base))
    for copied, index in zip(model.roof.fusion.layers, (2, 3)):
        state = copied.state_dict()
        assert all(torch.equal(state[k], v) for k, v in layers[index].state_dict().items())
        assert not all(torch.equal(state[k], v) for k, v in layers[index - 2].state_dict().items())


def test_the_second_text_encoder_reads_the_second_window_only(tokenizer):
    """With two text encoders, the second encoder's weights change the prediction of a text longer than one window
    and leave a text within the first window untouched: it reads the second window, and only that."""
    torch.manual_seed(0)
    model = RoofTransformerForSequenceClassification(_config(tokenizer, num_labels=2, num_text_encoders=2)).eval()
    window, knowledge = model.config.text_window, torch.tensor([[2]])
    short, long = (torch.randint(5, len(tokenizer), (1, n)) for n in (window - 4, window + 20))
    with torch.no_grad():
        before = [model(input_ids=ids, knowledge_input_ids=knowledge).logits for ids in (short, long)]
        for parameter in model.roof.extra_text_encoders[0].parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
        after = [model(input_ids=ids, knowledge_input_ids=knowledge).logits for ids in (short, long)]
    assert torch.equal(before[0], after[0])
    assert not torch.allclose(before[1], after[1], atol=1e-4)


def _lstm_by_hand(lstm, states, mask):
    """A one-layer bidirectional LSTM written out in float64 (gates i, f, g, o, PyTorch's weight layout), run per row
    over the row's tokens only, in order (the text's padding sits between its text and its knowledge tokens); zero
    at padding positions."""

    def weights(suffix):
        return [
            getattr(lstm, f"{name}_l0{suffix}").detach().double().numpy()
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        ]

    def run(sequence, w_ih, w_hh, b_ih, b_hh):
        h, c, outputs = np.zeros(w_hh.shape[1]), np.zeros(w_hh.shape[1]), []
        for x in sequence:
            i, f, g, o = np.split(w_ih @ x + b_ih + w_hh @ h + b_hh, 4)
            c = 1 / (1 + np.exp(-f)) * c + 1 / (1 + np.exp(-i)) * np.tanh(g)
            h = 1 / (1 + np.exp(-o)) * np.tanh(c)
            outputs.append(h)
        return np.stack(outputs)

    states, out = states.detach().double().numpy(), np.zeros(states.shape)
    for row in range(states.shape[0]):
        tokens = np.flatnonzero(mask[row].numpy())
        sequence = states[row, tokens]
        forward, backward = run(sequence, *weights("")), run(sequence[::-1], *weights("_reverse"))[::-1]
        out[row, tokens] = np.concatenate([forward, backward], axis=1)
    return torch.from_numpy(out).float()


def _roof_by_hand(fusion, states, mask):
    if fusion.kind == "linear":  # GELU (erf form, BERT's "gelu") of one linear layer, at every position
        x = states @ fusion.linear.weight.T + fusion.linear.bias
        return 0.5 * x * (1 + torch.erf(x / 2**0.5))
    if fusion.kind == "lstm":
        return _lstm_by_hand(fusion.lstm, states, mask)
    for layer in fusion.layers:  # the roof's transformer layers in order, padding masked as keys
        states = bert_layer_by_hand(layer, states, mask)
    return states


@pytest.mark.parametrize("fusion, layers", [("linear", 1), ("lstm", 1), ("transformer_random", 2)])
def test_each_roof_computes_its_function_of_the_concatenated_states(tokenizer, kg, fusion, layers):
    """The roof's output values (paper 3.1, 4.5) from its own weights, by hand, on a batch whose rows have text
    padding between text and knowledge tokens: the linear roof is GELU(W·s + b) per position; the LSTM roof a
    bidirectional LSTM over each row's tokens only, in order (text then knowledge: the same states whatever the
    batch's padding, zero at padding); the random-transformer roof its BERT layers in order with padding masked.
    The classifier then reads the mean of the fused text states."""
    torch.manual_seed(0)
    model = RoofTransformerForSequenceClassification(
        _config(tokenizer, fusion=fusion, fusion_layers=layers, num_labels=2)
    ).eval()
    with torch.no_grad():  # zero biases and unit LayerNorms would hide a missing term
        for parameter in model.roof.fusion.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    batch = {k: v for k, v in _batch(_processor(tokenizer, kg)).items() if k != "labels"}
    seen = {}
    model.roof.fusion.register_forward_pre_hook(lambda module, args: seen.update(states=args[0], mask=args[1]))
    with torch.no_grad():
        fused = model.roof(**batch)
        logits = model(**batch).logits
    states, mask = seen["states"], seen["mask"]
    text_length = batch["input_ids"].shape[1]
    assert torch.equal(mask, torch.cat([batch["attention_mask"], batch["knowledge_attention_mask"]], dim=1))
    assert (mask[:, :text_length] == 0).any(dim=1).sum() == 2  # two rows with padding inside the fused sequence
    want = _roof_by_hand(model.roof.fusion, states, mask)
    torch.testing.assert_close(fused.last_hidden_state, want, atol=1e-5, rtol=1e-5)
    text, text_mask = want[:, :text_length], batch["attention_mask"].unsqueeze(-1).float()
    pooled = (text * text_mask).sum(1) / text_mask.sum(1)
    torch.testing.assert_close(logits, pooled @ model.classifier.weight.T + model.classifier.bias, atol=1e-5, rtol=1e-5)


def test_an_answer_position_outside_the_feature_is_a_value_error_naming_it(tokenizer, kg, assets):
    """transformers' span loss ignores a start / end beyond the feature, and a batch of only such positions made the
    loss NaN: for Roof-Transformer's and KALA's QA heads such a position is a ValueError naming it and the length;
    a sentence's last token and [CLS] (0, no answer in the window) train."""
    from keplm import KalaForQuestionAnswering, KalaProcessor

    from .test_kala_model import TEXTS, batch_of, make_model

    roof = RoofTransformerForQuestionAnswering(_config(tokenizer))
    batch = {k: v for k, v in _batch(_processor(tokenizer, kg)).items() if k != "labels"}
    kala = make_model(KalaForQuestionAnswering, tokenizer, assets)
    kala_batch = batch_of(KalaProcessor(tokenizer, assets), TEXTS[:3])
    for model, inputs in ((roof, batch), (kala, kala_batch)):
        length, size = inputs["input_ids"].shape[1], inputs["input_ids"].shape[0]
        last, zero = torch.full((size,), length - 1), torch.zeros(size, dtype=torch.long)
        final_tokens = inputs["attention_mask"].sum(1) - 1  # Roof-Transformer masks padding logits to the minimum
        assert torch.isfinite(model(**inputs, start_positions=zero, end_positions=final_tokens).loss)
        with pytest.raises(ValueError, match=rf"end_positions hold id {length + 4} outside \[0, {length}\)"):
            model(**inputs, start_positions=zero, end_positions=last + 5)
        with pytest.raises(ValueError, match=rf"start_positions hold id {length} outside \[0, {length}\)"):
            model(**inputs, start_positions=last + 1, end_positions=last)
