"""KALA on encoder-decoder models (issue 26 part 3, KALA section 5.6): KalaForConditionalGeneration over tiny random
T5 and BART built in code. KFM and relational retrieval in the encoder, the stock decoder; loss with labels; generate()
reads the knowledge once through the encoder (greedy and beam search); save -> load identical; padded batch = single
inputs; KFM the identity off entities; built on plain seq2seq checkpoints, refusing encoder- or decoder-only ones."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoModelForSeq2SeqLM,
    BertConfig,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    T5ForConditionalGeneration,
)
from transformers.modeling_outputs import Seq2SeqLMOutput

from keplm import KalaForConditionalGeneration, KalaProcessor
from keplm.modeling.families import encoder_blocks, modulated_norms, text_encoder

from .seq2seq_fixtures import SEQ2SEQ_CONFIGS, seq2seq_tokenizer
from .test_kala_model import assert_gradients_reach, batch_of, relational_kala

TEXTS = ["john visited paris and unknownia in france .", "berlin is a city", "mary works for acme bank in london ."]
NO_ENTITY = "who works for acme bank ?"


@pytest.fixture(scope="module")
def s2s_tokenizer():
    return seq2seq_tokenizer()


@pytest.fixture()
def processor(s2s_tokenizer, assets):
    return KalaProcessor(s2s_tokenizer, assets)


def make_generator(tokenizer, assets, family: str, **kwargs) -> KalaForConditionalGeneration:
    torch.manual_seed(0)
    encoder_config = SEQ2SEQ_CONFIGS[family](len(tokenizer))
    return relational_kala(KalaForConditionalGeneration, encoder_config, assets, **{"kfm_layers": [0, 1], **kwargs})


def targets(tokenizer, answers):
    labels = tokenizer(text_target=answers, padding=True, return_tensors="pt").input_ids
    return labels.masked_fill(labels == tokenizer.pad_token_id, -100)


@pytest.mark.parametrize("family", SEQ2SEQ_CONFIGS)
def test_forward_with_labels_gives_a_loss_and_reaches_the_knowledge_modules(s2s_tokenizer, assets, processor, family):
    model = make_generator(s2s_tokenizer, assets, family).train()
    batch = batch_of(processor, TEXTS)
    assert (batch["entity_token_map"] >= 0).any()
    out = model(**batch, labels=targets(s2s_tokenizer, ["paris", "berlin", "london"]))
    assert isinstance(out, Seq2SeqLMOutput)
    assert out.logits.shape[:2] == (3, 2) and out.loss.ndim == 0 and torch.isfinite(out.loss)
    out.loss.backward()
    parts = ("kala.entity_memory.", "kala.knowledge_layers.0.modulation.", "kala.knowledge_layers.1.retrieval.")
    assert_gradients_reach(model, (*parts, "kala.relation_embeddings.", "decoder.", "shared."))


@pytest.mark.parametrize("family", SEQ2SEQ_CONFIGS)
def test_padded_batch_equals_single_inputs(s2s_tokenizer, assets, processor, family):
    model = make_generator(s2s_tokenizer, assets, family)
    batch = batch_of(processor, TEXTS)
    start = torch.full((3, 1), model.generation_config.decoder_start_token_id)
    with torch.no_grad():
        out = model(**batch, decoder_input_ids=start)
        for row, text in enumerate(TEXTS):
            single = model(**batch_of(processor, [text]), decoder_input_ids=start[:1])
            length = single.encoder_last_hidden_state.shape[1]
            torch.testing.assert_close(
                out.encoder_last_hidden_state[row, :length], single.encoder_last_hidden_state[0], atol=1e-5, rtol=1e-4
            )
            torch.testing.assert_close(out.logits[row], single.logits[0], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("family", SEQ2SEQ_CONFIGS)
def test_kfm_is_the_identity_off_entities(s2s_tokenizer, assets, processor, family):
    """At the modulated norms of the encoder, tokens outside mentions read the norm's own output bit for bit and
    mention tokens are modulated; a text without any linked entity, and any text with KFM initialised to the
    identity, gives the stock encoder's hidden states exactly."""
    model = make_generator(s2s_tokenizer, assets, family)
    batch = batch_of(processor, TEXTS)
    off = batch["entity_token_map"] < 0
    on = ~off & batch["attention_mask"].bool()
    seen = []
    for block in encoder_blocks(model.seq2seq):
        for norm in modulated_norms(block):  # registered after KFM's hooks: they see the modulated output
            norm.register_forward_hook(lambda module, args, out: seen.append((module, args[0], out)))
    with torch.no_grad():
        model.kala(**{k: v for k, v in batch.items()})
    assert len(seen) == 4
    for norm, x, out in seen:
        plain = norm.forward(x)
        assert torch.equal(out[off], plain[off])
        assert not torch.equal(out[on], plain[on])
    stock_encoder = text_encoder(model.seq2seq)

    def stock(inputs):
        model.kala._state = None
        return stock_encoder(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).last_hidden_state

    plain_batch = batch_of(processor, [NO_ENTITY])
    assert not (plain_batch["entity_token_map"] >= 0).any()
    with torch.no_grad():
        torch.testing.assert_close(model.kala(**plain_batch).last_hidden_state, stock(plain_batch), atol=0, rtol=0)
        for layer in model.kala.knowledge_layers.values():  # KFM's second layers at zero: γ = 1, β = 0
            layer.modulation.fc2_weight.zero_()
            layer.modulation.fc2_bias.zero_()
        torch.testing.assert_close(model.kala(**batch).last_hidden_state, stock(batch), atol=0, rtol=0)


@pytest.mark.parametrize("family", SEQ2SEQ_CONFIGS)
def test_generate_reads_the_knowledge_once_through_the_encoder(s2s_tokenizer, assets, processor, family):
    model = make_generator(s2s_tokenizer, assets, family)
    batch = batch_of(processor, TEXTS)
    calls = []
    model.kala.register_forward_hook(lambda module, args, kwargs, out: calls.append(kwargs), with_kwargs=True)
    with torch.no_grad():
        out = model.generate(
            **batch, max_new_tokens=4, do_sample=False, output_logits=True, return_dict_in_generate=True
        )
        assert len(calls) == 1 and calls[0]["entity_token_map"] is batch["entity_token_map"]
        start = torch.full((3, 1), model.generation_config.decoder_start_token_id)
        first = model(**batch, decoder_input_ids=start).logits[:, -1]
        torch.testing.assert_close(out.logits[0], first, atol=1e-5, rtol=1e-4)
        unlinked = {**batch, "entity_token_map": torch.full_like(batch["entity_token_map"], -1)}
        assert not torch.allclose(model(**unlinked, decoder_input_ids=start).logits[:, -1], first)
        # beam search: the encoder (with the graph) runs once, the beams expand its output only
        calls.clear()
        beams = model.generate(**batch, max_new_tokens=4, num_beams=2, num_return_sequences=2, do_sample=False)
        assert len(calls) == 1 and beams.shape[0] == 6
        encoded = model.kala(**batch)
        again = model.generate(
            attention_mask=batch["attention_mask"],
            encoder_outputs=encoded,
            max_new_tokens=4,
            num_beams=2,
            num_return_sequences=2,
            do_sample=False,
        )
        assert torch.equal(beams, again)


@pytest.mark.parametrize("family", SEQ2SEQ_CONFIGS)
def test_generate_with_and_without_the_cache_and_by_sampling(s2s_tokenizer, assets, processor, family):
    """What transformers' GenerationTesterMixin checks and its sdist does not ship (tests/transformers_common.py):
    greedy decoding gives the same tokens with the decoder's cache as without it, and sampling with a seed is
    reproducible, its tokens the vocabulary's, with the knowledge read once per call."""
    model = make_generator(s2s_tokenizer, assets, family)
    batch = batch_of(processor, TEXTS)
    calls = []
    model.kala.register_forward_hook(lambda *args: calls.append(1))
    with torch.no_grad():
        cached = model.generate(**batch, max_new_tokens=5, do_sample=False, use_cache=True)
        uncached = model.generate(**batch, max_new_tokens=5, do_sample=False, use_cache=False)
        assert torch.equal(cached, uncached) and len(calls) == 2
        torch.manual_seed(3)
        sampled = model.generate(**batch, max_new_tokens=5, do_sample=True, top_k=5)
        torch.manual_seed(3)
        assert torch.equal(model.generate(**batch, max_new_tokens=5, do_sample=True, top_k=5), sampled)
    assert sampled.shape[0] == len(TEXTS) and 0 <= int(sampled.min()) and int(sampled.max()) < len(s2s_tokenizer)


@pytest.mark.parametrize("family", SEQ2SEQ_CONFIGS)
def test_save_load_identical_outputs_and_generations(tmp_path, s2s_tokenizer, assets, processor, family):
    model = make_generator(s2s_tokenizer, assets, family)
    batch = batch_of(processor, TEXTS)
    start = torch.full((3, 1), model.generation_config.decoder_start_token_id)
    with torch.no_grad():
        before = model(**batch, decoder_input_ids=start).logits
        generated = model.generate(**batch, max_new_tokens=4, num_beams=2)
        model.save_pretrained(tmp_path)
        loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
        assert type(loaded) is KalaForConditionalGeneration
        assert loaded.knowledge_assets.content_hash() == assets.content_hash()
        assert torch.equal(loaded(**batch, decoder_input_ids=start).logits, before)
        assert torch.equal(loaded.generate(**batch, max_new_tokens=4, num_beams=2), generated)
    if family == "t5":  # tied embeddings stay tied after loading
        assert loaded.seq2seq.lm_head.weight.data_ptr() == loaded.seq2seq.shared.weight.data_ptr()


def test_from_base_pretrained_builds_on_a_plain_t5_checkpoint(tmp_path, s2s_tokenizer, assets):
    torch.manual_seed(1)
    base = T5ForConditionalGeneration(SEQ2SEQ_CONFIGS["t5"](len(s2s_tokenizer))).eval()
    base.save_pretrained(tmp_path / "t5")
    model = KalaForConditionalGeneration.from_base_pretrained(tmp_path / "t5", knowledge_assets=assets, kfm_layers=[-1])
    stock = model.seq2seq.state_dict()
    for name, weight in base.state_dict().items():
        assert torch.equal(stock[name], weight), name
    assert model.config.is_encoder_decoder and model.config.kfm_layer_indices == [1]
    assert set(model.loading_report["newly_initialized"]) == {
        "kala.entity_memory",
        "kala.knowledge_layers",
        "kala.relation_embeddings",
    }
    ids = torch.tensor([[10, 11, 12, 1]])
    no_knowledge = {"entity_token_map": torch.full_like(ids, -1), "node_entity_ids": torch.zeros(0, dtype=torch.long)}
    with torch.no_grad():  # no entity linked: exactly the plain T5's generation
        assert torch.equal(
            model.generate(input_ids=ids, **no_knowledge, max_new_tokens=5),
            base.generate(input_ids=ids, max_new_tokens=5),
        )


@pytest.mark.parametrize(
    ("base", "kind"),
    [
        (
            lambda n: BertModel(
                BertConfig(
                    vocab_size=n, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48
                )
            ),
            "encoder-only",
        ),
        (lambda n: GPT2LMHeadModel(GPT2Config(vocab_size=n, n_embd=32, n_layer=2, n_head=2)), "decoder-only"),
    ],
)
def test_from_base_pretrained_refuses_a_model_without_encoder_and_decoder(tmp_path, s2s_tokenizer, assets, base, kind):
    base(len(s2s_tokenizer)).save_pretrained(tmp_path / "base")
    with pytest.raises(ValueError, match=f"{kind}.*encoder-decoder model"):
        KalaForConditionalGeneration.from_base_pretrained(tmp_path / "base", knowledge_assets=assets)


def test_knowledge_modules_get_their_own_adamw_beside_adafactor(tmp_path, s2s_tokenizer, assets, processor):
    """KALA's T5 setup (section 5.6): the seq2seq model in the Trainer's Adafactor (``optim="adafactor"``), the
    knowledge modules in an AdamW of their own at their learning rate and weight decay 0.01 (not on biases); each
    parameter in exactly one optimizer, the schedule reaching both, and one step moves both."""
    from transformers import Adafactor, Seq2SeqTrainingArguments

    from keplm.training.optim import CombinedOptimizer
    from keplm.training.trainer import KeplmTrainer

    model = make_generator(s2s_tokenizer, assets, "t5").train()
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path), learning_rate=1e-4, optim="adafactor", report_to="none", use_cpu=True, warmup_steps=0
    )
    trainer = KeplmTrainer(
        model=model,
        args=args,
        parameter_group_options={
            "knowledge_learning_rate": 1e-3,
            "knowledge_optimizer": "adamw",
            "knowledge_weight_decay": 0.01,
        },
    )
    trainer.create_optimizer_and_scheduler(num_training_steps=10)
    optimizer = trainer.optimizer
    assert isinstance(optimizer, CombinedOptimizer) and isinstance(optimizer.main, Adafactor)
    (adamw,) = optimizer.others
    assert isinstance(adamw, torch.optim.AdamW)
    names = {id(p): name for name, p in model.named_parameters()}
    in_adamw = {id(p): g for g in adamw.param_groups for p in g["params"]}
    in_main = {id(p) for g in optimizer.main.param_groups for p in g["params"]}
    assert not in_main & set(in_adamw) and in_main | set(in_adamw) == set(names)
    for pid, name in names.items():
        assert (pid in in_adamw) == model.is_knowledge_parameter(name), name
    for group in adamw.param_groups:
        assert group["lr"] == 1e-3
        assert group["weight_decay"] == (0.01 if all(p.dim() > 1 for p in group["params"]) else 0.0)
    assert {g["lr"] for g in optimizer.main.param_groups if g["params"]} == {1e-4}
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    batch = batch_of(processor, TEXTS)
    model(**batch, labels=targets(s2s_tokenizer, ["paris", "berlin", "london"])).loss.backward()
    optimizer.step()
    trainer.lr_scheduler.step()
    moved = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert any(model.is_knowledge_parameter(n) for n in moved) and any(n.startswith("kala.encoder.") for n in moved)
    assert {round(g["lr"], 12) for g in optimizer.param_groups if g["params"]} == {9e-5, 9e-4}
    with pytest.raises(ValueError, match="unknown knowledge_optimizer"):
        model.parameter_groups(1e-4, knowledge_optimizer="sgd")


def test_text2text_pipeline_links_and_generates(tmp_path, s2s_tokenizer, assets, processor):
    """``pipeline("keplm-text2text")`` (text2text-generation semantics) loads the model with its processor, links the
    input, and returns what generate() + decoding give, for a question with its context and for plain text; batched
    inputs answer as single ones; generate() options pass through."""
    from transformers import pipeline

    model = make_generator(s2s_tokenizer, assets, "t5")
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    generator = pipeline("keplm-text2text", model=str(tmp_path))
    question = {"question": "who lives in paris ?", "context": "john lives in paris . paris is in france ."}
    features = processor.prepare_generative_qa_features({k: [v] for k, v in question.items()}, max_length=64)
    assert (torch.tensor(features["entity_token_map"][0]) >= 0).any()  # the context was linked
    with torch.no_grad():
        expected = model.generate(**processor.as_tensors({k: v[0] for k, v in features.items()}), max_new_tokens=4)
        plain = model.generate(**processor(TEXTS[0], return_tensors="pt"), max_new_tokens=4)
    decode = processor.tokenizer.decode
    answer = generator(question, max_length=64, max_new_tokens=4)
    assert answer == [{"generated_text": decode(expected[0], skip_special_tokens=True).strip()}]
    assert generator(max_length=64, max_new_tokens=4, **question) == answer
    assert generator(TEXTS[0], max_new_tokens=4) == [{"generated_text": decode(plain[0], skip_special_tokens=True)}]
    batched = generator([TEXTS[0], question, TEXTS[1]], batch_size=2, max_length=64, max_new_tokens=4)
    assert batched[0] == generator(TEXTS[0], max_new_tokens=4) and batched[1] == answer
    assert batched[2] == generator(TEXTS[1], max_new_tokens=4)
    assert len(generator(question, max_new_tokens=4, num_beams=2, num_return_sequences=2)) == 2
    with pytest.raises(ValueError, match="takes a string or"):
        generator({"text": "paris"})


def test_push_to_hub_and_load_give_identical_generations(hub_server, s2s_tokenizer, assets, processor):
    """model.push_to_hub (with the processor's push) to the test Hub, then AutoModelForSeq2SeqLM / the
    keplm-text2text pipeline from the repo: the same generations, the knowledge assets and a card whose usage
    snippet loads the model with AutoModelForSeq2SeqLM."""
    from huggingface_hub import ModelCard
    from transformers import pipeline

    model = make_generator(s2s_tokenizer, assets, "t5")
    model.push_to_hub("org/kala-t5")
    processor.push_to_hub("org/kala-t5")
    batch = batch_of(processor, TEXTS)
    loaded = AutoModelForSeq2SeqLM.from_pretrained("org/kala-t5").eval()
    assert type(loaded) is KalaForConditionalGeneration
    assert loaded.knowledge_assets.content_hash() == assets.content_hash()
    with torch.no_grad():
        assert torch.equal(
            loaded.generate(**batch, max_new_tokens=4, num_beams=2),
            model.generate(**batch, max_new_tokens=4, num_beams=2),
        )
    question = {"question": "who lives in paris ?", "context": "john lives in paris ."}
    local = pipeline("keplm-text2text", model=model, processor=processor)(question, max_new_tokens=4)
    assert pipeline("keplm-text2text", model="org/kala-t5")(question, max_new_tokens=4) == local
    card = ModelCard.load("org/kala-t5")
    assert card.data.library_name == "keplm" and card.data.pipeline_tag == "text2text-generation"
    assert 'AutoModelForSeq2SeqLM.from_pretrained("org/kala-t5")' in card.text


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_weights_a_checkpoint_lacks_get_the_stock_init_and_loaded_ones_stay(s2s_tokenizer, assets, family):
    """``from_pretrained`` with a state dict lacking a decoder attention weight and a KFM weight: the stock weight gets
    the stock model's own init (T5 initialises q/k/v/o from its attention module: the std of a fresh stock model's
    weight, not an uninitialised tensor), the KFM weight KALA's, and every weight the state dict holds is kept."""
    model = make_generator(s2s_tokenizer, assets, family)
    state = model.state_dict()
    stock_name = next(n for n in state if "decoder" in n and ".q" in n.replace("q_proj", "q") and n.endswith("weight"))
    kfm_name = next(n for n in state if "knowledge_layers" in n and n.endswith("fc2_weight"))
    kept = {n: v for n, v in state.items() if n not in (stock_name, kfm_name)}
    loaded = KalaForConditionalGeneration.from_pretrained(
        None, config=model.config, state_dict=kept, knowledge_assets=assets
    )
    weights = dict(loaded.state_dict())
    for name, value in kept.items():
        torch.testing.assert_close(weights[name], value, msg=name)
    stock = AutoModelForSeq2SeqLM.from_config(model.config.encoder_config)
    fresh = dict(stock.named_parameters())[stock_name.removeprefix("kala.encoder.")]
    assert 0.5 < float(weights[stock_name].std() / fresh.std()) < 2.0
    assert torch.isfinite(weights[kfm_name]).all() and 0 < float(weights[kfm_name].std()) < 0.1
