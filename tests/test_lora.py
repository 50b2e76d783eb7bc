"""LoRA with peft: adapters on the encoder, KALA's knowledge modules and head trained fully, frozen weights
untouched by training, and an adapter saved/pushed with its KG that loads onto its base with identical outputs."""

from __future__ import annotations

import pytest
import torch
from transformers import BertModel, TrainingArguments

import keplm  # noqa: F401
from keplm import KalaForTokenClassification, KalaProcessor, KeplmTrainer
from keplm.data.collator import KeplmDataCollator
from keplm.modeling.lora import add_lora, fully_trained_modules, load_lora, push_lora, save_lora

from .conftest import tiny_encoder_config

TEXTS = ["john visited paris and unknownia in france .", "berlin is a city", "mary works for acme bank in london ."]


@pytest.fixture()
def base_dir(tmp_path, tokenizer):
    torch.manual_seed(0)
    BertModel(tiny_encoder_config(tokenizer)).save_pretrained(tmp_path / "base")
    return tmp_path / "base"


def _model(base_dir, assets):
    torch.manual_seed(1)
    return KalaForTokenClassification.from_base_pretrained(
        base_dir, knowledge_assets=assets, num_labels=3, retrieval_mode="relational", kfm_layers=[-1]
    )


def _batch(processor, model):
    batch = KeplmDataCollator.from_processor(processor, model)([processor(t) for t in TEXTS])
    return batch, torch.ones_like(batch["input_ids"])


def test_lora_trains_adapters_and_knowledge_modules_only(tmp_path, base_dir, tokenizer, assets):
    model = _model(base_dir, assets)
    assert {"kala.entity_memory.embeddings", "kala.relation_embeddings", "classifier"} <= set(
        fully_trained_modules(model)
    )
    peft_model = add_lora(model, r=4, alpha=8, dropout=0.0)
    processor = KalaProcessor(tokenizer, assets)
    batch, labels = _batch(processor, model)
    trainable = {n for n, p in peft_model.named_parameters() if p.requires_grad}
    assert any("lora_A" in n for n in trainable) and any("entity_memory" in n for n in trainable)
    assert not [n for n in trainable if ".encoder." in n and "lora_" not in n]  # encoder weights are frozen
    frozen = {n: p.detach().clone() for n, p in peft_model.named_parameters() if not p.requires_grad}
    args = TrainingArguments(output_dir=str(tmp_path / "out"), learning_rate=1e-2, use_cpu=True, report_to="none")
    trainer = KeplmTrainer(
        model=peft_model,
        args=args,
        processing_class=processor,
        parameter_group_options={"knowledge_learning_rate": 5e-2},
    )
    trainer.create_optimizer_and_scheduler(num_training_steps=3)
    trained = {n: p.detach().clone() for n, p in peft_model.named_parameters() if p.requires_grad}
    for _ in range(3):
        trainer.optimizer.zero_grad()
        peft_model(**batch, labels=labels).loss.backward()
        trainer.optimizer.step()
    for name, parameter in peft_model.named_parameters():
        if name in frozen:
            assert torch.equal(parameter, frozen[name]), name  # bit-identical after the optimizer steps
    assert any(
        not torch.equal(p, trained[n])
        for n, p in peft_model.named_parameters()
        if n in trained and "modules_to_save" in n and "entity_memory" in n
    )  # the knowledge modules do train
    knowledge_lrs = {
        g["lr"]
        for g in trainer.optimizer.param_groups
        if any(p is q for p in g["params"] for n, q in peft_model.named_parameters() if "knowledge" in n)
    }
    assert 5e-2 in knowledge_lrs  # KALA's parameter groups still apply under peft


def test_saved_and_pushed_adapter_loads_onto_its_base(hub_server, tmp_path, base_dir, tokenizer, assets):
    peft_model = add_lora(_model(base_dir, assets), r=4, alpha=8, dropout=0.0)
    with torch.no_grad():  # adapters and fully trained modules away from their initial values
        for parameter in peft_model.parameters():
            if parameter.requires_grad:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    processor = KalaProcessor(tokenizer, assets)
    batch, _ = _batch(processor, peft_model.get_base_model())
    expected = peft_model.eval()(**batch).logits
    save_lora(peft_model, tmp_path / "adapter")
    assert (tmp_path / "adapter" / "knowledge" / "kg" / "triples.tsv").is_file()
    local = load_lora(tmp_path / "adapter").eval()
    torch.testing.assert_close(local(**batch).logits, expected)
    push_lora(peft_model, "org/kala-lora")
    from huggingface_hub import ModelCard

    card = ModelCard.load("org/kala-lora")  # keplm's card with its knowledge section, not peft's template
    assert card.data.library_name == "keplm" and "knowledge" in card.text.lower() and "peft" in str(card).lower()
    pulled = load_lora("org/kala-lora", base_model_name_or_path=str(base_dir)).eval()
    torch.testing.assert_close(pulled(**batch).logits, expected)
    assert pulled.get_base_model().knowledge_assets.content_hash() == assets.content_hash()


def test_lora_on_trelm_trains_injection_and_head_fully_and_freezes_the_encoder(tokenizer, kg):
    """TRELM under peft: adapters on the encoder; the knowledge injection is trained fully (modules_to_save); the
    frozen encoder weights stay bit-identical through optimizer steps on the MLM + CKA loss."""
    from keplm import TrelmProcessor
    from keplm.data.masking import MaskedLMCollator

    from .test_trelm import ANNOTATION, TEXT, features, make_model, with_kge

    assets = with_kge(kg)
    model = make_model(tokenizer, assets)
    assert {"trelm.injection.projection", "lm_head"} <= set(fully_trained_modules(model))
    peft_model = add_lora(model, r=4, alpha=8, dropout=0.0)
    trainable = {n for n, p in peft_model.named_parameters() if p.requires_grad}
    assert any("lora_A" in n for n in trainable) and any(".injection." in n for n in trainable)
    assert not [n for n in trainable if ".encoder." in n and "lora_" not in n]
    frozen = {n: p.detach().clone() for n, p in peft_model.named_parameters() if not p.requires_grad}
    before = {n: p.detach().clone() for n, p in peft_model.named_parameters() if p.requires_grad}
    processor = TrelmProcessor(tokenizer, assets)
    rows = features(processor, (TEXT,) * 2, (ANNOTATION,) * 2)
    collator = MaskedLMCollator(
        KeplmDataCollator.from_processor(processor), tokenizer.mask_token_id, len(tokenizer), mlm_probability=0.5
    )
    torch.manual_seed(0)
    batch = collator([{k: v[i] for k, v in rows.items()} for i in range(2)])
    optimizer = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=1e-2)
    peft_model.train()
    for _ in range(3):
        optimizer.zero_grad()
        peft_model(**batch).loss.backward()
        optimizer.step()
    for name, parameter in peft_model.named_parameters():
        if name in frozen:
            assert torch.equal(parameter, frozen[name]), name
    assert any(
        not torch.equal(p, before[n]) for n, p in peft_model.named_parameters() if n in before and ".injection." in n
    )  # the injection does train


@pytest.mark.parametrize("targets", [("query", "nonexistent"), ("nonexistent",)])
def test_an_unknown_lora_target_module_is_refused_by_name(tokenizer, assets, targets):
    """Every name of --lora_target_modules must end some encoder module: one unknown name among known ones would
    silently train fewer modules than asked."""
    from keplm import KalaForTokenClassification
    from keplm.modeling.lora import add_lora

    from .test_kala_model import make_model

    model = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3)
    with pytest.raises(ValueError, match=r"no encoder module ends with \['nonexistent'\]"):
        add_lora(model, r=2, target_modules=targets)
    assert add_lora(model, r=2, target_modules=("query",)) is not None


def test_an_adapter_in_a_subfolder_is_rebuilt_on_the_base_its_subfolder_names(tmp_path, base_dir, tokenizer, assets):
    """``load_lora(folder, subfolder=...)`` reads that subfolder's ``keplm_adapter.json`` (the base encoder), not the
    folder's top level nor peft's ``adapter_config.json`` (which a pushed adapter points at its own repo)."""
    import json

    peft_model = add_lora(_model(base_dir, assets), r=4, alpha=8, dropout=0.0)
    processor = KalaProcessor(tokenizer, assets)
    batch, _ = _batch(processor, peft_model.get_base_model())
    expected = peft_model.eval()(**batch).logits
    save_lora(peft_model, tmp_path / "repo" / "ner")
    adapter_config = tmp_path / "repo" / "ner" / "adapter_config.json"
    settings = json.loads(adapter_config.read_text())
    adapter_config.write_text(json.dumps({**settings, "base_model_name_or_path": "org/not-a-base"}))
    loaded = load_lora(tmp_path / "repo", subfolder="ner").eval()
    torch.testing.assert_close(loaded(**batch).logits, expected)


def test_base_encoder_of_reads_keplm_adapter_json_else_the_peft_config(tmp_path, base_dir, assets):
    """``base_encoder_of``: the base encoder an adapter's ``keplm_adapter.json`` names (a subfolder's adapter: its
    own), else (an adapter saved before that file) ``adapter_config.json``'s, or that of the config passed."""
    from keplm.modeling.lora import BASE_ENCODER_FILE, base_encoder_of

    save_lora(add_lora(_model(base_dir, assets), r=4, alpha=8, dropout=0.0), tmp_path / "repo" / "ner")
    assert base_encoder_of(tmp_path / "repo", subfolder="ner") == str(base_dir)
    (tmp_path / "repo" / "ner" / BASE_ENCODER_FILE).unlink()
    assert base_encoder_of(tmp_path / "repo" / "ner") == str(base_dir)
    assert base_encoder_of(tmp_path / "repo" / "ner", {"base_model_name_or_path": "org/base"}) == "org/base"


def test_load_lora_builds_the_model_in_the_dtype_asked(tmp_path, base_dir, assets):
    """``load_lora(..., dtype=torch.float64)``: the rebuilt model and its adapter hold float64 weights (the default
    float32), and the adapter's weights are the saved ones."""
    peft_model = add_lora(_model(base_dir, assets), r=4, alpha=8, dropout=0.0)
    save_lora(peft_model, tmp_path / "adapter")
    wide = load_lora(tmp_path / "adapter", dtype=torch.float64)
    assert {p.dtype for p in wide.parameters()} == {torch.float64}
    assert {p.dtype for p in load_lora(tmp_path / "adapter").parameters()} == {torch.float32}
    # the other two ways an adapter loads pass dtype on: the model class (merged) and peft's AutoPeftModel base
    from keplm.modeling.lora import PeftBaseModel

    merged = KalaForTokenClassification.from_pretrained(tmp_path / "adapter", dtype=torch.float64)
    assert {p.dtype for p in merged.parameters()} == {torch.float64}
    base = PeftBaseModel.from_pretrained(tmp_path / "adapter", dtype=torch.float64)
    assert {p.dtype for p in base.parameters()} == {torch.float64}
    saved = {n: p for n, p in peft_model.named_parameters() if "lora_" in n}
    for name, parameter in wide.named_parameters():
        if name in saved:
            torch.testing.assert_close(parameter, saved[name].double(), msg=name)


def test_an_adapter_applied_to_other_encoder_weights_warns(tmp_path, base_dir, tokenizer, assets, caplog):
    """An adapter records a digest of its base encoder's weights (``keplm_adapter.json``): loaded onto another
    encoder of the same shape it warns, naming the adapter and the encoder; onto its own encoder it does not, in the
    saved dtype or another (the digest compares the weights in the dtype they were saved in)."""
    import json
    import logging

    peft_model = add_lora(_model(base_dir, assets), r=4, alpha=8, dropout=0.0)
    save_lora(peft_model, tmp_path / "adapter")
    recorded = json.loads((tmp_path / "adapter" / "keplm_adapter.json").read_text())["base_encoder_weights"]
    assert recorded["dtype"] == "float32" and len(recorded["sha256"]) == 64
    torch.manual_seed(5)  # the same architecture and shapes, other weights
    BertModel(tiny_encoder_config(tokenizer)).save_pretrained(tmp_path / "other")
    with caplog.at_level(logging.WARNING, logger="keplm.modeling.lora"):
        load_lora(tmp_path / "adapter")
        load_lora(tmp_path / "adapter", dtype=torch.float64)
        save_lora(add_lora(_model(base_dir, assets).double(), r=4, alpha=8, dropout=0.0), tmp_path / "wide")
        wide = json.loads((tmp_path / "wide" / "keplm_adapter.json").read_text())["base_encoder_weights"]
        assert wide["dtype"] == "float64" and wide["sha256"] != recorded["sha256"]
        load_lora(tmp_path / "wide")  # float64 weights recorded, float32 loaded: the same encoder
        assert not [r for r in caplog.records if "other base encoder weights" in r.getMessage()]
        load_lora(tmp_path / "adapter", base_model_name_or_path=str(tmp_path / "other"))
    (warning,) = [r.getMessage() for r in caplog.records if "other base encoder weights" in r.getMessage()]
    assert str(tmp_path / "adapter") in warning and str(tmp_path / "other") in warning


def test_a_trelm_adapter_reloads_onto_its_base_without_a_weights_warning(tmp_path, tokenizer, kg, caplog):
    """TRELM's routing modules sit inside the encoder and are new (trained fully): the digest leaves them out, so
    an adapter rebuilt on its own encoder does not warn, and one whose encoder layer changed does."""
    import json
    import logging

    from .test_trelm import make_model, with_kge

    model = make_model(tokenizer, with_kge(kg))
    encoder_dir = tmp_path / "encoder"
    (name,) = model.named_encoders()
    model.named_encoders()[name].save_pretrained(encoder_dir)
    peft_model = add_lora(model, r=4, alpha=8, dropout=0.0)
    save_lora(peft_model, tmp_path / "adapter")
    record = json.loads((tmp_path / "adapter" / "keplm_adapter.json").read_text())
    with caplog.at_level(logging.WARNING, logger="keplm.modeling.lora"):
        load_lora(tmp_path / "adapter", base_model_name_or_path=str(encoder_dir))
        assert not [r for r in caplog.records if "other base encoder weights" in r.getMessage()], record
        with torch.no_grad():
            encoder = type(model.named_encoders()[name]).from_pretrained(encoder_dir)
            next(encoder.parameters()).add_(0.5)
            encoder.save_pretrained(tmp_path / "changed")
        load_lora(tmp_path / "adapter", base_model_name_or_path=str(tmp_path / "changed"))
    assert [r for r in caplog.records if "other base encoder weights" in r.getMessage()]
