"""Encoder families under keplm's methods (issue 26): tiny random configs of each family that NER/QA users pick. KALA
relational: forward, backward into the knowledge modules, save/load, padded batch = single sentence, and KFM the
identity off entities; Roof-Transformer: forward, backward, save/load; TRELM: knowledge routing finds each block's
FFN. A family a method cannot serve is refused with a ValueError saying why."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig

from keplm import (
    KalaForTokenClassification,
    KalaModel,
    RoofTransformerConfig,
    RoofTransformerForSequenceClassification,
)
from keplm.knowledge import KnowledgeAssets
from keplm.modeling.base import build_encoder
from keplm.modeling.families import PRE_LN_BLOCKS, encoder_blocks, modulated_norms
from keplm.modeling.knowledge_routing import KnowledgeRouter, RoutedLinear

from .test_kala_model import TEXTS, assert_gradients_reach, batch_of, relational_kala
from .test_roof_model import KNOWLEDGE, _batch, _processor

#: model types and any config fields their tiny version needs
FAMILIES = {
    "bert": {},
    "roberta": {},
    "xlm-roberta": {},
    "camembert": {},
    "electra": {},
    "deberta": {},
    "deberta-v2": {},
    "distilbert": {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 48},
    "albert": {"embedding_size": 16},
    "modernbert": {"global_attn_every_n_layers": 2},
    "mpnet": {},
    "ernie": {},
    "megatron-bert": {},
    "roformer": {},
    "data2vec-text": {},
    "rembert": {},
    "xlm-roberta-xl": {"type_vocab_size": 2},  # the roof's sentence pairs use token type 1
}
#: families KALA refuses, with the reason the error must give
KALA_REFUSED = {"mobilebert": "no pair of LayerNorms to modulate"}
#: families Roof-Transformer's roof (copies of the encoder's layers) refuses
ROOF_REFUSED = {"modernbert": "rotary position embeddings"}
#: families TRELM's knowledge routing refuses
ROUTING_REFUSED = {"albert": "shares one block", "modernbert": "gated MLP"}


def family_config(tokenizer, model_type: str):
    torch.manual_seed(0)
    return AutoConfig.for_model(
        model_type,
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=48,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        cls_token_id=2,
        sep_token_id=3,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        **FAMILIES.get(model_type, {}),
    )


def kala(cls, tokenizer, assets, model_type: str, **kwargs):
    return relational_kala(cls, family_config(tokenizer, model_type), assets, **kwargs)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_kala_forward_backward_reaches_the_knowledge_modules(tokenizer, assets, processor, model_type):
    model = kala(KalaForTokenClassification, tokenizer, assets, model_type, num_labels=3, kfm_layers=[0, 1]).train()
    batch = batch_of(processor, TEXTS)
    loss = model(**batch, labels=batch["attention_mask"].clone()).loss
    loss.backward()
    parts = ("entity_memory.", "knowledge_layers.0.modulation.", "knowledge_layers.1.modulation.")
    assert_gradients_reach(model, (*parts, "knowledge_layers.1.retrieval.", "relation_embeddings.", "encoder."))


@pytest.mark.parametrize("model_type", FAMILIES)
def test_kala_padded_batch_equals_single_sentences(tokenizer, assets, processor, model_type):
    model = kala(KalaForTokenClassification, tokenizer, assets, model_type, num_labels=3, kfm_layers=[0, 1])
    batch = batch_of(processor, TEXTS)
    with torch.no_grad():
        logits = model(**batch).logits
        for row, text in enumerate(TEXTS):
            single = model(**batch_of(processor, [text])).logits[0]
            torch.testing.assert_close(logits[row, : single.shape[0]], single, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_kala_save_load_identical_outputs(tmp_path, tokenizer, assets, processor, model_type):
    model = kala(KalaForTokenClassification, tokenizer, assets, model_type, num_labels=3)
    batch = batch_of(processor, TEXTS)
    with torch.no_grad():
        before = model(**batch).logits
        model.save_pretrained(tmp_path)
        loaded = KalaForTokenClassification.from_pretrained(tmp_path).eval()
        assert loaded.config.encoder_config.model_type == model.config.encoder_config.model_type
        assert torch.equal(loaded(**batch).logits, before)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_kala_is_the_identity_off_entities(tokenizer, assets, processor, model_type):
    """At each modulated module (post-LN: the two LayerNorms; pre-LN: the pre-norms of attention and MLP) of the
    chosen layer, every token outside a mention reads the module's own output bit for bit, and mention tokens are
    modulated; the other layer (for ALBERT: the other pass through the shared block) is not modulated at all. For
    post-LN families with KFM on the last layer, off-entity tokens of the output equal the bare encoder's."""
    batch = batch_of(processor, TEXTS)
    off = batch["entity_token_map"] < 0
    on = ~off & batch["attention_mask"].bool()
    assert on.any() and (off & batch["attention_mask"].bool()).any()
    for chosen in (0, 1):
        model = kala(KalaModel, tokenizer, assets, model_type, kfm_layers=[chosen])
        blocks = encoder_blocks(model.encoder)
        seen = {}  # (norm, call number) -> (input, output after KFM's hook)

        def record(module, args, out, seen=seen):
            seen[(module, sum(key[0] is module for key in seen))] = (args[0], out)

        for block in dict.fromkeys(blocks):
            for norm in modulated_norms(block):  # registered after KFM's hooks: they see the modulated output
                norm.register_forward_hook(record)
        with torch.no_grad():
            model(**batch)
        assert len(seen) == 2 * len(blocks)
        calls = {}
        for index, block in enumerate(blocks):
            for norm in modulated_norms(block):
                call = calls[norm] = calls.get(norm, -1) + 1
                x, out = seen[(norm, call)]
                plain = norm.forward(x)  # the module's own output, without hooks
                assert torch.equal(out[off], plain[off])
                assert torch.equal(out[on], plain[on]) is (index != chosen), (index, chosen)
    if type(blocks[-1]).__name__ in PRE_LN_BLOCKS:  # attention after the pre-norms mixes mention states into others
        return
    model = kala(KalaModel, tokenizer, assets, model_type, kfm_layers=[-1])
    with torch.no_grad():
        out = model(**batch).last_hidden_state
        model._state = None  # the bare encoder, same weights
        reference = model.encoder(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
        ).last_hidden_state
    assert torch.equal(out[off], reference[off])
    assert not torch.allclose(out[on], reference[on])


@pytest.mark.parametrize("model_type", KALA_REFUSED)
def test_kala_refuses_a_family_without_layernorms_to_modulate(tokenizer, assets, model_type):
    with pytest.raises(ValueError, match=KALA_REFUSED[model_type]):
        kala(KalaModel, tokenizer, assets, model_type)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_roof_transformer_forward_backward_save_load(tmp_path, tokenizer, kg, model_type):
    config = RoofTransformerConfig(
        encoder_config=family_config(tokenizer, model_type),
        fusion="transformer",
        fusion_layers=1,
        max_knowledge_length=KNOWLEDGE,
        num_labels=3,
    )
    if model_type in ROOF_REFUSED:
        with pytest.raises(ValueError, match=ROOF_REFUSED[model_type]):
            RoofTransformerForSequenceClassification(config)
        return
    model = RoofTransformerForSequenceClassification(config).eval()
    model.set_knowledge_assets(KnowledgeAssets(kg=kg))
    batch = _batch(_processor(tokenizer, kg))
    out = model(**batch)
    out.loss.backward()
    assert all(
        p.grad is not None and p.grad.abs().sum() > 0
        for p in model.roof.fusion.layers.parameters()
        if p.requires_grad and p.dim() > 1
    )
    model.save_pretrained(tmp_path)
    loaded = RoofTransformerForSequenceClassification.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(loaded(**batch).logits, model(**batch).logits)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_trelm_routing_finds_the_ffn_of_each_layer(tokenizer, model_type):
    encoder = build_encoder(family_config(tokenizer, model_type)).eval()
    if model_type in ROUTING_REFUSED:
        with pytest.raises(ValueError, match=ROUTING_REFUSED[model_type]):
            KnowledgeRouter(encoder, 2, 0.25)
        return
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    with torch.no_grad():
        before = encoder(input_ids=ids).last_hidden_state
    router = KnowledgeRouter(encoder, 2, 0.25)
    assert len(router.layers) == 2
    states = []
    for hook, first, second in router.layers:
        assert isinstance(first, RoutedLinear) and isinstance(second, RoutedLinear)
        assert first.out_features == second.in_features == 48  # the FFN's intermediate neurons
        hook.register_forward_hook(lambda m, a, out: states.append(out))
    with torch.no_grad():
        torch.testing.assert_close(encoder(input_ids=ids).last_hidden_state, before)  # zero deltas: same function
        assert [s.shape[-1] for s in states] == [48, 48]
        router.layers[-1][2].route_weight.normal_()  # the routed path is in the forward pass
        assert not torch.allclose(encoder(input_ids=ids).last_hidden_state, before)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_kala_gradient_checkpointing_gives_the_same_gradients(tokenizer, assets, processor, model_type):
    """With gradient checkpointing the recomputed blocks meet the same knowledge (KFM on the same layers, ALBERT's
    passes counted the same), so every gradient equals the plain run's; a family whose own transformers model cannot
    checkpoint (ALBERT, MPNet) is refused with transformers' ValueError, as the plain model is."""
    encoder = build_encoder(family_config(tokenizer, model_type))
    try:
        encoder.gradient_checkpointing_enable()
        plain_checkpoints = True
    except ValueError:
        plain_checkpoints = False
    batch = batch_of(processor, TEXTS)
    grads = []
    for checkpointing in (False, True):
        model = kala(KalaForTokenClassification, tokenizer, assets, model_type, num_labels=3, kfm_layers=[0, 1]).train()
        if checkpointing and not plain_checkpoints:
            with pytest.raises(ValueError, match="not compatible with gradient checkpointing"):
                model.gradient_checkpointing_enable()
            return
        if checkpointing:
            model.gradient_checkpointing_enable()
        model(**batch, labels=batch["attention_mask"].clone()).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("model_type", ["roberta", "xlm-roberta"])
def test_roof_on_a_one_token_type_checkpoint_needs_segmentation_none(tmp_path, tokenizer, kg, model_type):
    """RoBERTa and XLM-R checkpoints have one token type: the paper's segmentations (type B = 1) are a ValueError
    naming segmentation='none', which reads every token as type 0 and trains, saves and loads (it was an IndexError
    inside the embedding)."""
    encoder_config = family_config(tokenizer, model_type)
    encoder_config.type_vocab_size = 1
    options = {"fusion": "transformer", "fusion_layers": 1, "max_knowledge_length": KNOWLEDGE, "num_labels": 3}
    for segmentation in ("type1", "type2"):
        with pytest.raises(ValueError, match="has type_vocab_size 1: use segmentation='none'"):
            RoofTransformerConfig(encoder_config=encoder_config, segmentation=segmentation, **options)
    model = RoofTransformerForSequenceClassification(
        RoofTransformerConfig(encoder_config=encoder_config, segmentation="none", **options)
    ).eval()
    model.set_knowledge_assets(KnowledgeAssets(kg=kg))
    batch = _batch(_processor(tokenizer, kg))  # a BERT tokenizer's pairs carry type 1: the roof reads type 0
    model(**batch).loss.backward()
    model.save_pretrained(tmp_path)
    with torch.no_grad():
        assert torch.equal(
            RoofTransformerForSequenceClassification.from_pretrained(tmp_path).eval()(**batch).logits,
            model(**batch).logits,
        )
