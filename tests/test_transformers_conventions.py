"""transformers' conventions that users of keplm's models rely on (issue 41): the output flags set on the config are
honoured (not only those passed to forward), and ``return_dict=False`` (in the call or the config) returns a tuple
as transformers' own models do. Each model family on tiny configs; each check fails without the fix."""

from __future__ import annotations

import pytest
import torch

from keplm import KalaForQuestionAnswering, KalaForTokenClassification, KalaProcessor, KeplmDataCollator

from .test_kala_model import make_model as make_kala
from .test_relation_extraction import collate, read_docred_rows, tiny_model
from .test_trelm import make_model as make_trelm
from .test_trelm import masked_batch, with_kge


def _kala(cls, tokenizer, assets):
    model = make_kala(cls, tokenizer, assets, num_labels=3)
    batch = KeplmDataCollator.from_processor(KalaProcessor(tokenizer, assets), model)(
        [KalaProcessor(tokenizer, assets)("john visited paris .")]
    )
    return model, batch


def _trelm(tokenizer, kg):
    assets = with_kge(kg)
    _, _, batch = masked_batch(tokenizer, assets, 2, 0.5)
    return make_trelm(tokenizer, assets).eval(), batch


def _relation_extraction(tokenizer):
    _, batch = collate(tokenizer, read_docred_rows())
    batch = {k: v for k, v in batch.items() if k != "edge_labels"}
    return tiny_model(tokenizer), batch


@pytest.fixture(params=["kala-ner", "kala-qa", "trelm", "relation-extraction"])
def model_and_batch(request, tokenizer, assets, kg):
    if request.param == "kala-ner":
        return _kala(KalaForTokenClassification, tokenizer, assets)
    if request.param == "kala-qa":
        return _kala(KalaForQuestionAnswering, tokenizer, assets)
    if request.param == "trelm":
        return _trelm(tokenizer, kg)
    return _relation_extraction(tokenizer)


def test_output_flags_on_the_config_are_honoured(model_and_batch):
    model, batch = model_and_batch
    layers = model.config.encoder_config.num_hidden_layers
    with torch.no_grad():
        plain = model(**batch)
        assert plain.hidden_states is None and plain.attentions is None
        model.set_attn_implementation("eager")  # attention weights need the eager attention
        model.config.output_hidden_states = True
        model.config.output_attentions = True
        flagged = model(**batch)
        assert len(flagged.hidden_states) == layers + 1 and len(flagged.attentions) == layers
        called = model(**batch, output_hidden_states=False, output_attentions=False)  # the call wins
    assert called.hidden_states is None and called.attentions is None


def test_return_dict_false_returns_a_tuple(model_and_batch):
    model, batch = model_and_batch
    with torch.no_grad():  # the same seed for each call: TRELM's contrastive loss samples negatives
        torch.manual_seed(0)
        output = model(**batch)
        torch.manual_seed(0)
        as_tuple = model(**batch, return_dict=False)
        model.config.return_dict = False
        torch.manual_seed(0)
        from_config = model(**batch)
    assert isinstance(as_tuple, tuple) and isinstance(from_config, tuple)
    expected = output.to_tuple()
    assert len(as_tuple) == len(expected)
    for got, want in zip(as_tuple, expected):
        torch.testing.assert_close(got, want)
    for got, want in zip(from_config, expected):
        torch.testing.assert_close(got, want)


def test_trelm_init_weights_sets_the_kg_embedding_buffers(tokenizer, kg):
    """``_init_weights`` leaves no buffer as allocated (``from_pretrained`` allocates non-persistent buffers
    uninitialised): TRELM's KG-embedding table and its mask are emptied, as the memory bank is."""
    model, _ = _trelm(tokenizer, kg)
    injection = model.trelm.injection
    assert injection.has_kge.any()  # filled from the knowledge assets
    injection.kge.fill_(float("nan"))
    model._init_weights(injection)
    assert not injection.has_kge.any() and torch.equal(injection.kge, torch.zeros_like(injection.kge))


def test_a_model_saved_without_knowledge_assets_is_said_at_save_and_at_load(tmp_path, tokenizer, assets, caplog):
    """A KALA model built from its config and saved before its knowledge assets were set: the save warns that the
    folder cannot be loaded yet, and the load error names that cause (not only another tool's save)."""
    import logging

    from keplm import KalaConfig

    from .conftest import tiny_encoder_config

    config = KalaConfig(
        encoder_config=tiny_encoder_config(tokenizer), entity_vocab_size=assets.num_entities, num_labels=3
    )
    with caplog.at_level(logging.WARNING, logger="keplm.modeling.base"):
        KalaForTokenClassification(config).save_pretrained(tmp_path)
    assert "has no knowledge assets" in caplog.text and "set_knowledge_assets" in caplog.text
    with pytest.raises(FileNotFoundError, match="by a model that had none"):
        KalaForTokenClassification.from_pretrained(tmp_path)


@pytest.mark.parametrize("name", ["kala-ner", "trelm"])
def test_a_head_models_base_model_saves_a_loadable_folder(tmp_path, tokenizer, assets, kg, name):
    """``model.base_model.save_pretrained`` (what transformers' ``test_correct_missing_keys`` does) writes the knowledge
    assets with the base model's weights: the folder loads into the base model and, with the head new, the head model
    (before: the base model had no assets, and the folder could not be loaded)."""
    model, batch = _kala(KalaForTokenClassification, tokenizer, assets) if name == "kala-ner" else _trelm(tokenizer, kg)
    model.base_model.save_pretrained(tmp_path)
    base = type(model.base_model).from_pretrained(tmp_path)
    assert base.knowledge_assets.content_hash() == model.knowledge_assets.content_hash()
    head, info = type(model).from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] and head.knowledge_assets.content_hash() == model.knowledge_assets.content_hash()


def test_from_pretrained_without_a_path_takes_config_state_dict_and_assets(tokenizer, assets):
    """``from_pretrained(None, config=..., state_dict=...)`` builds the model from memory, as transformers' models do;
    ``knowledge_assets=`` gives it its assets (without them it has none, as a model built from its config)."""
    model, batch = _kala(KalaForTokenClassification, tokenizer, assets)
    loaded = KalaForTokenClassification.from_pretrained(
        None, config=model.config, state_dict=model.state_dict(), knowledge_assets=assets
    )
    assert loaded.knowledge_assets is assets
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, model(**batch).logits)
    bare = KalaForTokenClassification.from_pretrained(None, config=model.config, state_dict=model.state_dict())
    assert bare.knowledge_assets is None


@pytest.mark.slow
def test_kala_exports_with_torch_export_and_keeps_its_outputs(tokenizer, assets):
    """``torch.export`` traces KALA token classification (the inference skip of the knowledge layers is a branch on
    the data, taken only eagerly); the exported program gives the eager logits."""
    model, batch = _kala(KalaForTokenClassification, tokenizer, assets)
    names = (
        "input_ids",
        "attention_mask",
        "token_type_ids",
        "entity_token_map",
        "node_entity_ids",
        "edge_index",
        "edge_relation_ids",
    )
    inputs = {name: batch[name] for name in names if name in batch}
    with torch.no_grad():
        program = torch.export.export(model, args=(), kwargs=inputs, strict=False)
        torch.testing.assert_close(program.module()(**inputs).logits, model(**inputs).logits)


def test_trelm_takes_inputs_embeds_with_its_knowledge_inputs(tokenizer, kg):
    """TRELM with ``inputs_embeds`` (the word embeddings of the input ids) and its knowledge inputs gives what it
    gives with ``input_ids``: the knowledge is injected into the given embeddings."""
    model, batch = _trelm(tokenizer, kg)
    embeds = model.get_input_embeddings()(batch["input_ids"])
    with torch.no_grad():
        torch.manual_seed(0)
        from_ids = model(**batch)
        torch.manual_seed(0)
        from_embeds = model(**{k: v for k, v in batch.items() if k != "input_ids"}, inputs_embeds=embeds)
    torch.testing.assert_close(from_embeds.logits, from_ids.logits)
    torch.testing.assert_close(from_embeds.loss, from_ids.loss)
    with pytest.raises(ValueError, match="either input_ids or inputs_embeds"):
        model(**batch, inputs_embeds=embeds)


def test_roof_returns_tuples_and_refuses_per_layer_outputs_by_name(tokenizer, kg):
    """Roof-Transformer: ``return_dict=False`` gives the tuple of its output; asking for hidden states or attentions
    (in the call or the config) is a ValueError saying why there are none, not a silent omission."""
    from keplm import RoofTransformerForSequenceClassification

    from .test_roof_model import _batch, _config, _processor

    torch.manual_seed(0)
    model = RoofTransformerForSequenceClassification(_config(tokenizer, num_labels=3)).eval()
    batch = _batch(_processor(tokenizer, kg), model)
    with torch.no_grad():
        output = model(**batch)
        as_tuple = model(**batch, return_dict=False)
    assert isinstance(as_tuple, tuple) and len(as_tuple) == 2
    torch.testing.assert_close(as_tuple[1], output.logits)
    with pytest.raises(ValueError, match="no per-layer hidden states"):
        model(**batch, output_hidden_states=True)
    model.config.output_hidden_states = True
    with pytest.raises(ValueError, match="no per-layer hidden states"):
        model(**batch)


def test_kala_trains_with_gradient_checkpointing_without_reentrant_recomputation(tokenizer, assets):
    """Gradient checkpointing (``use_reentrant=False``) gives the gradients of the plain backward."""
    model, batch = _kala(KalaForTokenClassification, tokenizer, assets)
    model.train()
    labels = torch.zeros_like(batch["input_ids"])
    torch.manual_seed(0)  # the same dropout masks in both passes
    model(**batch, labels=labels).loss.backward()
    plain = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    torch.manual_seed(0)
    model(**batch, labels=labels).loss.backward()
    checkpointed = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert checkpointed.keys() == plain.keys() and any("entity_memory" in name for name in plain)
    for name, grad in plain.items():
        torch.testing.assert_close(checkpointed[name], grad, msg=name)


def test_resized_token_embeddings_take_the_new_ids_and_survive_a_reload(model_and_batch, tmp_path):
    """``resize_token_embeddings`` after adding tokens: the model takes the new ids, ``get_text_config()`` (the
    wrapped encoder's config) records the new size, and the saved model reloads with it and gives the same output."""
    model, batch = model_and_batch
    model.eval()
    size = model.get_input_embeddings().num_embeddings
    model.resize_token_embeddings(size + 3)
    assert model.get_input_embeddings().num_embeddings == size + 3
    assert model.config.get_text_config().vocab_size == size + 3
    batch = dict(batch)
    ids = batch["input_ids"].clone()
    ids[0, 1] = size + 2  # a new token
    batch["input_ids"] = ids
    with torch.no_grad():
        torch.manual_seed(0)
        before = model(**batch)
    model.save_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path).eval()
    assert loaded.get_input_embeddings().num_embeddings == size + 3
    with torch.no_grad():
        torch.manual_seed(0)
        after = loaded(**batch)
    for name, value in before.items():  # the scores (TRELM's losses read its memory bank: training state, not saved)
        if torch.is_tensor(value) and not name.endswith("loss"):
            torch.testing.assert_close(after[name], value, msg=name)


def test_roof_resizes_its_text_encoder_and_reloads(tokenizer, kg, tmp_path):
    """Roof-Transformer: ``resize_token_embeddings`` resizes the text encoder (the knowledge encoder keeps its own
    vocabulary, as a composite model's other towers do); the saved model reloads with the new size."""
    from keplm import RoofTransformerForSequenceClassification

    from .test_roof_model import _batch, _config, _processor

    torch.manual_seed(0)
    model = RoofTransformerForSequenceClassification(_config(tokenizer, num_labels=3)).eval()
    processor = _processor(tokenizer, kg)
    model.set_knowledge_assets(processor.knowledge_assets)
    batch = _batch(processor, model)
    size = model.get_input_embeddings().num_embeddings
    knowledge_size = model.config.knowledge_encoder_config.vocab_size
    model.resize_token_embeddings(size + 2)
    assert model.config.encoder_config.vocab_size == size + 2
    assert model.config.knowledge_encoder_config.vocab_size == knowledge_size
    batch["input_ids"] = batch["input_ids"].clone()
    batch["input_ids"][0, 1] = size + 1
    with torch.no_grad():
        before = model(**batch).logits
    model.save_pretrained(tmp_path)
    loaded = RoofTransformerForSequenceClassification.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, before)


@pytest.mark.parametrize("enable", ["activation_checkpointing_enable", "gradient_checkpointing_enable"])
def test_kala_refuses_reentrant_gradient_checkpointing_by_name(tokenizer, assets, enable):
    """``use_reentrant=True`` would backpropagate the knowledge vectors twice (an error deep in autograd): it is a
    ValueError at enable time, through the current name and the deprecated one; the default still enables."""
    model, _ = _kala(KalaForTokenClassification, tokenizer, assets)
    kwargs_name = (
        "activation_checkpointing_kwargs" if enable.startswith("activation") else "gradient_checkpointing_kwargs"
    )
    with pytest.raises(ValueError, match="use_reentrant=False"):
        getattr(model, enable)(**{kwargs_name: {"use_reentrant": True}})
    assert not model.is_activation_checkpointing
    getattr(model, enable)()
    assert model.is_activation_checkpointing


def test_trelm_evaluation_loss_is_the_same_every_call(tokenizer, kg):
    """In eval mode TRELM's CKA loss draws the same negatives on every call (transformers' tuple-vs-dict output test
    calls the model twice and compares the losses): the loss is reproducible; in training they are drawn afresh."""
    model, batch = _trelm(tokenizer, kg)
    assert batch.get("cka_labels") is not None and (batch["cka_labels"] != -100).any()
    with torch.no_grad():
        first, second = model(**batch), model(**batch)
    assert first.cka_loss is not None and torch.equal(first.loss, second.loss)


def test_kala_t5_honours_the_output_flags_of_its_config(tokenizer, assets):
    """``output_hidden_states`` / ``output_attentions`` set on KALA-T5's config reach the decoder too (the stock T5
    inside read its own config, so decoder states and attentions never came back: found by transformers' common
    tests); the call's value wins."""
    from .seq2seq_fixtures import seq2seq_tokenizer
    from .test_kala_generation import batch_of, make_generator

    s2s = seq2seq_tokenizer()
    model = make_generator(s2s, assets, "t5")
    batch = batch_of(KalaProcessor(s2s, assets), ["john visited paris ."])
    batch["decoder_input_ids"] = s2s(["paris"], return_tensors="pt").input_ids
    model.set_attn_implementation("eager")  # attention weights come from eager attention only
    model.config.output_hidden_states, model.config.output_attentions = True, True
    with torch.no_grad():
        out = model(**batch)
        plain = model(**batch, output_hidden_states=False, output_attentions=False)
    layers = model.config.encoder_config.num_layers
    assert len(out.decoder_hidden_states) == layers + 1 and len(out.decoder_attentions) == layers
    assert len(out.encoder_hidden_states) == layers + 1 and len(out.cross_attentions) == layers
    assert plain.decoder_hidden_states is None and plain.decoder_attentions is None
