"""Behaviour of the KALA model: KFM identity, relational retrieval, batching, save/load, Auto classes, errors."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForQuestionAnswering, AutoModelForTokenClassification

import keplm  # noqa: F401  (registers the Auto classes)
from keplm import KalaConfig, KalaForQuestionAnswering, KalaForTokenClassification, KalaModel, KalaProcessor
from keplm.data.collator import KeplmDataCollator
from keplm.modeling.kfm import modulate

from .conftest import tiny_encoder_config

TEXTS = ["john visited paris and unknownia in france .", "berlin is a city", "mary works for acme bank in london ."]


def make_model(cls, tokenizer, assets, mode="relational", **kwargs):
    torch.manual_seed(0)
    kwargs.setdefault("entity_dropout", 0.0)  # train-mode forwards compared here must be deterministic
    config = KalaConfig(
        encoder_config=tiny_encoder_config(tokenizer),
        retrieval_mode=mode,
        entity_vocab_size=assets.num_entities,
        num_relations=assets.num_relations,
        **kwargs,
    )
    model = cls(config).eval()
    # the zero-initialised biases would hide bugs: give every new weight a visible value
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "encoder" not in name and parameter.dim() >= 1 and "embeddings" not in name:
                parameter.normal_(0, 0.3)
        if model.base_model.entity_memory is not None:
            model.base_model.entity_memory.embeddings.weight[1:].normal_(0, 1.0)
    model.set_knowledge_assets(assets)
    return model


def make_knowledge_visible(model):
    """Random values in KALA's knowledge layers and in the entity memory's rows but the null one: the zero-initialised
    biases would hide a missing term. Returns ``model``."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "knowledge_layers" in name:
                parameter.normal_(0, 0.3)
        model.base_model.entity_memory.embeddings.weight[1:].normal_(0, 1.0)
    return model


def relational_kala(cls, encoder_config, assets, **kwargs):
    """KALA relational of class ``cls`` over ``encoder_config`` without entity dropout, in eval mode, its knowledge
    weights visible (``make_knowledge_visible``), reading ``assets``."""
    config = KalaConfig(
        encoder_config=encoder_config,
        retrieval_mode="relational",
        entity_vocab_size=assets.num_entities,
        num_relations=assets.num_relations,
        entity_dropout=0.0,
        **kwargs,
    )
    model = make_knowledge_visible(cls(config).eval())
    model.set_knowledge_assets(assets)
    return model


def batch_of(processor, texts, **collator_kwargs):
    collator = KeplmDataCollator.from_processor(
        processor, entity_vocab_size=processor.knowledge_assets.num_entities, **collator_kwargs
    )
    return collator([processor(t) for t in texts])


def assert_gradients_reach(model, parts) -> None:
    """After a backward pass: some parameter whose name contains each of ``parts`` has a non-zero gradient."""
    for part in parts:
        assert any(
            part in name and p.grad is not None and p.grad.abs().sum() > 0 for name, p in model.named_parameters()
        ), f"no gradient reaches {part}"


def test_modulate_is_identity_off_entity_and_shared_within_mention():
    hidden = torch.randn(1, 6, 4)
    token_map = torch.tensor([[-1, 0, 0, -1, 1, -1]])
    gamma, beta = torch.randn(2, 4), torch.randn(2, 4)
    out = modulate(hidden, token_map, gamma, beta)
    off = token_map[0] < 0
    assert torch.equal(out[0, off], hidden[0, off])
    assert torch.allclose(out[0, 1], gamma[0] * hidden[0, 1] + beta[0])
    assert torch.allclose(out[0, 2], gamma[0] * hidden[0, 2] + beta[0])  # same node, same γ/β
    assert torch.allclose(out[0, 4], gamma[1] * hidden[0, 4] + beta[1])


def test_small_modulation_survives_a_bf16_table():
    """The node table holds γ − 1 and is promoted to the residual stream's dtype before the 1 is added: a bf16
    table (autocast) keeps a small h(v), which 1 + 1e-3 in bf16 would round away."""
    from keplm.modeling.kfm import apply_modulation, gather_modulation

    hidden = torch.randn(1, 3, 8)
    table = torch.zeros(2, 4, 8, dtype=torch.bfloat16)
    table[1, 0] = 1e-3  # node 1: γ1 − 1
    dtype = torch.promote_types(table.dtype, hidden.dtype)
    delta, beta, _, _ = gather_modulation(table, torch.tensor([[1, -1, 0]]), dtype)
    out = apply_modulation(hidden, torch.tensor([[True, False, True]]), delta, beta)
    assert out.dtype == hidden.dtype
    torch.testing.assert_close(out[0, 0], hidden[0, 0] * (1 + float(torch.tensor(1e-3, dtype=torch.bfloat16))))
    assert torch.equal(out[0, 1], hidden[0, 1]) and torch.equal(out[0, 2], hidden[0, 2])


@pytest.mark.parametrize("mode", ["relational", "pointwise"])
def test_kfm_last_layer_leaves_non_entity_tokens_bit_identical(tokenizer, assets, processor, mode):
    model = make_model(KalaModel, tokenizer, assets, mode, kfm_layers=[-1])
    batch = batch_of(processor, TEXTS)
    out = model(**batch).last_hidden_state
    model._state = None  # the bare encoder with the same weights, no knowledge
    reference = model.encoder(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"]
    ).last_hidden_state
    off_entity = batch["entity_token_map"] < 0
    on_entity = ~off_entity & batch["attention_mask"].bool()
    assert on_entity.any()
    assert torch.equal(out[off_entity], reference[off_entity])
    assert not torch.allclose(out[on_entity], reference[on_entity])


def test_null_entity_without_informative_neighbour_is_not_modulated(tokenizer, assets, processor):
    # "unknownia" is unseen (null row); pointwise retrieval has no way to give it knowledge
    model = make_model(KalaModel, tokenizer, assets, "pointwise", kfm_layers=[-1])
    batch = batch_of(processor, ["unknownia is a country"])
    out = model(**batch)
    unknownia = batch["node_entity_ids"].tolist().index(0)
    assert not out.entity_has_knowledge[unknownia]
    model._state = None
    reference = model.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    assert torch.equal(out.last_hidden_state, reference)


def test_unseen_entity_gets_meaning_from_its_neighbours(tokenizer, assets, processor):
    model = make_model(KalaModel, tokenizer, assets, "relational", kfm_layers=[-1])
    text = "unknownia is in france"  # the KG says (unknownia, country, france); unknownia is unseen in training
    features = processor(text)
    unknownia = features["node_entity_ids"].index(0)
    batch = KeplmDataCollator.from_processor(processor)([features])
    out = model(**batch)
    assert out.entity_has_knowledge[unknownia]
    assert out.entity_representations[unknownia].abs().sum() > 0
    # its tokens now depend on the neighbour's memory row: change France's embedding, unknownia's output moves
    tokens = batch["entity_token_map"][0] == unknownia
    before = out.last_hidden_state[0, tokens].clone()
    with torch.no_grad():
        model.entity_memory.embeddings.weight[assets.entity_row("Q142")] += 1.0
    after = model(**batch).last_hidden_state[0, tokens]
    assert not torch.allclose(before, after)
    # without its fact the unseen entity is a knowledge-free null node
    features["edge_index"], features["edge_relation_ids"] = [[], []], []
    alone = model(**KeplmDataCollator.from_processor(processor)([features]))
    assert not alone.entity_has_knowledge[unknownia]


def _eq3_by_hand(retrieval, x, context, edges, relation_vectors, informative):
    """KALA eq. (3) node by node with the W blocks read out of the merged products: per target i, a softmax of
    aᵀ LeakyReLU(W [e_i ‖ r_ij ‖ e_j ‖ h_i]) over its informative sources j (self loop: relation 0), weighing
    e_j, or e_j + W_m r_ij for composed messages."""
    d = x.shape[1]
    edges = edges + [(i, i, 0) for i in range(x.shape[0])]
    for depth, layer in enumerate(retrieval.layers):
        w_target, w_source = layer.lin_nodes.weight[:d], layer.lin_nodes.weight[d:]
        block = slice(depth * d, (depth + 1) * d)
        w_relation, w_context = retrieval.lin_relation.weight[block], retrieval.lin_context.weight[block]
        out, has = torch.zeros_like(x), torch.zeros(x.shape[0], dtype=torch.bool)
        for i in range(x.shape[0]):
            sources = [(j, r) for j, t, r in edges if t == i and informative[j]]
            if not sources:
                continue
            scores = torch.stack(
                [
                    layer.att
                    @ torch.nn.functional.leaky_relu(
                        w_target @ x[i]
                        + w_source @ x[j]
                        + w_relation @ relation_vectors[r]
                        + w_context @ context[i]
                        + retrieval.lin_context.bias[block],
                        0.2,
                    )
                    for j, r in sources
                ]
            )
            if retrieval.lin_message is None:
                values = [x[j] for j, _ in sources]
            else:
                values = [x[j] + retrieval.lin_message.weight[block] @ relation_vectors[r] for j, r in sources]
            out[i] = (scores.softmax(0).unsqueeze(-1) * torch.stack(values)).sum(0)
            has[i] = True
        x, informative = (torch.relu(out) if depth < len(retrieval.layers) - 1 else out), has
    return x, informative


@pytest.mark.parametrize("relation_message", ["entity", "composition"])
def test_relational_retrieval_is_eq3_with_null_sources_masked(relation_message):
    from keplm.modeling.relational_retrieval import RelationalRetrieval

    torch.manual_seed(0)
    retrieval = RelationalRetrieval(
        entity_dim=6, relation_dim=4, context_dim=5, num_layers=2, dropout=0.0, relation_message=relation_message
    )
    for parameter in retrieval.parameters():
        torch.nn.init.normal_(parameter)
    relations = torch.nn.Embedding(5, 4)
    informative = torch.tensor([True, False, True, False, False, True])  # nodes 1, 3, 4: null entities
    x = torch.randn(6, 6) * informative.unsqueeze(-1)
    context = torch.randn(6, 5)
    # node 1 (null) hears node 0; node 3 (null) hears only null node 4 in layer 1, then node 1 in layer 2
    edges = [(0, 1, 2), (4, 3, 1), (1, 3, 3), (2, 0, 4), (5, 0, 1), (0, 5, 2)]
    edge_index = torch.tensor([[h for h, _, _ in edges], [t for _, t, _ in edges]])
    got, got_has = retrieval(x, context, edge_index, relations, torch.tensor([r for _, _, r in edges]), informative)
    want, want_has = _eq3_by_hand(retrieval, x, context, edges, relations.weight, informative)
    assert got_has.tolist() == want_has.tolist() == [True, True, True, True, False, True]
    torch.testing.assert_close(got, want)
    assert torch.equal(got[4], torch.zeros(6))  # no informative neighbour within two hops: exactly zero


def test_composed_messages_depend_on_the_relation_and_the_paper_messages_do_not():
    """One informative neighbour: eq. 3 gives v = e_j whatever the relation (α = 1); the composed message moves
    with the relation by exactly W_m (r_a − r_b)."""
    from keplm.modeling.relational_retrieval import RelationalRetrieval

    relations = torch.nn.Embedding(4, 3)
    x = torch.tensor([[0.0] * 5, [1.0, -2.0, 0.5, 0.0, 3.0]])
    informative = torch.tensor([False, True])
    edge_index = torch.tensor([[1], [0]])
    for message in ("entity", "composition"):
        torch.manual_seed(1)
        retrieval = RelationalRetrieval(5, 3, 2, num_layers=1, dropout=0.0, relation_message=message)
        context = torch.randn(2, 2)
        first = retrieval(x, context, edge_index, relations, torch.tensor([2]), informative)[0][0]
        second = retrieval(x, context, edge_index, relations, torch.tensor([3]), informative)[0][0]
        if message == "entity":
            assert torch.equal(first, x[1]) and torch.equal(second, x[1])
        else:
            shift = retrieval.lin_message.weight @ (relations.weight[2] - relations.weight[3])
            torch.testing.assert_close(first - second, shift)
            torch.testing.assert_close(first, x[1] + retrieval.lin_message.weight @ relations.weight[2])


@pytest.mark.parametrize("p", [0.25, 0.6])
def test_entity_dropout_nulls_mentioned_nodes_only_in_training(p):
    from keplm.modeling.modeling_kala import entity_dropout

    torch.manual_seed(0)
    nodes = torch.arange(1, 2001)
    token_map = torch.arange(0, 3000).remainder(1000).view(30, 100)  # nodes 0..999 are mentioned, the rest not
    dropped, has = entity_dropout(nodes, token_map, p)
    assert torch.equal(dropped[1000:], nodes[1000:])  # neighbour-only nodes keep their rows
    share = (dropped[:1000] == 0).float().mean().item()
    assert abs(share - p) < 0.05
    assert torch.equal(has, dropped != 0)


def test_entity_dropout_is_off_in_eval_and_changes_training_forwards(tokenizer, assets, processor):
    model = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3, entity_dropout=0.5)
    batch = batch_of(processor, TEXTS)
    torch.manual_seed(0)
    assert torch.equal(model(**batch).logits, model(**batch).logits)  # eval: deterministic
    model.train()
    outputs = [model(**batch).logits for _ in range(4)]
    assert any(not torch.equal(outputs[0], other) for other in outputs[1:])


def test_configs_saved_before_the_knowledge_options_keep_the_paper_settings(tmp_path, tokenizer):
    config = KalaConfig(encoder_config=tiny_encoder_config(tokenizer))
    assert (config.relation_message, config.entity_dropout) == ("composition", 0.3)
    config.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    del data["relation_message"], data["entity_dropout"]
    (tmp_path / "config.json").write_text(json.dumps(data))
    old = KalaConfig.from_pretrained(tmp_path)
    assert (old.relation_message, old.entity_dropout) == ("entity", 0.0)
    with pytest.raises(ValueError, match="relation_message"):
        KalaConfig(encoder_config=tiny_encoder_config(tokenizer), relation_message="sum")
    with pytest.raises(ValueError, match="entity_dropout"):
        KalaConfig(encoder_config=tiny_encoder_config(tokenizer), entity_dropout=1.0)


@pytest.mark.parametrize("mode", ["relational", "pointwise", "none"])
def test_padded_batch_equals_single_examples(tokenizer, assets, processor, mode):
    model = make_model(KalaForTokenClassification, tokenizer, assets, mode, num_labels=3, kfm_layers=[0, 1])
    batch = batch_of(processor, TEXTS)
    logits = model(**batch).logits
    for row, text in enumerate(TEXTS):
        single = model(**batch_of(processor, [text])).logits[0]
        assert torch.allclose(logits[row, : single.shape[0]], single, atol=1e-5)


def test_graph_padding_does_not_change_outputs(tokenizer, assets, processor):
    model = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3)
    plain = model(**batch_of(processor, TEXTS)).logits
    padded = model(**batch_of(processor, TEXTS, graph_pad_to_multiple_of=16, pad_to_multiple_of=8)).logits
    assert torch.allclose(plain, padded[:, : plain.shape[1]], atol=1e-5)


@pytest.mark.parametrize(
    "cls,auto,mode,extra",
    [
        (KalaForTokenClassification, AutoModelForTokenClassification, "relational", {"num_labels": 5}),
        (KalaForTokenClassification, AutoModelForTokenClassification, "none", {"num_labels": 5, "num_extra_layers": 1}),
        (KalaForQuestionAnswering, AutoModelForQuestionAnswering, "relational", {}),
        (KalaForQuestionAnswering, AutoModelForQuestionAnswering, "pointwise", {}),
        (KalaModel, AutoModel, "relational", {}),
    ],
)
def test_save_load_round_trip_identical_outputs(tmp_path, tokenizer, assets, processor, cls, auto, mode, extra):
    model = make_model(cls, tokenizer, assets, mode, **extra)
    batch = batch_of(processor, TEXTS)
    before = model(**batch)
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    assert AutoConfig.from_pretrained(tmp_path).model_type == "kala"
    for loader in (auto, cls):
        loaded = loader.from_pretrained(tmp_path).eval()
        assert type(loaded) is cls
        after = loaded(**batch)
        for key in ("logits", "start_logits", "end_logits", "last_hidden_state"):
            if key in before:
                assert torch.equal(before[key], after[key]), key
        if mode != "none":
            assert loaded.knowledge_assets.entity_vocab == assets.entity_vocab
            assert loaded.knowledge_assets.kg.content_hash() == assets.kg.content_hash()
    reloaded = KalaProcessor.from_pretrained(tmp_path)
    assert reloaded(TEXTS[0]) == processor(TEXTS[0])


def test_checkpoint_without_knowledge_files_is_a_clear_error(tmp_path, tokenizer, assets):
    model = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3)
    model.save_pretrained(tmp_path)
    shutil.rmtree(tmp_path / "knowledge")
    with pytest.raises(FileNotFoundError, match="knowledge assets"):
        AutoModelForTokenClassification.from_pretrained(tmp_path)


def test_tampered_vocabulary_is_rejected(tmp_path, tokenizer, assets):
    model = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3)
    model.save_pretrained(tmp_path)
    vocab = tmp_path / "knowledge" / "entity_vocab.json"
    vocab.write_text(vocab.read_text().replace("Q90", "Q91"))
    with pytest.raises(ValueError, match="hash"):
        KalaForTokenClassification.from_pretrained(tmp_path)


def test_bad_inputs_give_clear_errors(tokenizer, assets, processor):
    model = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3)
    batch = batch_of(processor, TEXTS)
    with pytest.raises(ValueError, match="outside the entity memory"):
        model(**{**batch, "node_entity_ids": batch["node_entity_ids"] + 1000})
    with pytest.raises(ValueError, match="needs entity_token_map"):
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    with pytest.raises(ValueError, match="graph nodes"):
        model(**{**batch, "entity_token_map": batch["entity_token_map"].clamp(min=0) + 100})
    with pytest.raises(ValueError, match="edge_index"):
        model(**{**batch, "edge_index": batch["edge_index"][:1]})
    features = processor(TEXTS[0])
    with pytest.raises(ValueError, match="unknown entity id"):
        collator = KeplmDataCollator.from_processor(processor, entity_vocab_size=assets.num_entities)
        collator([{**features, "node_entity_ids": [10**6] * 5}])
    with pytest.raises(ValueError, match="edge"):
        KeplmDataCollator.from_processor(processor)([{**features, "edge_relation_ids": []}])
    with pytest.raises(ValueError):  # mention beyond the text
        processor(
            "paris", annotation={"entities": [{"text": "paris", "start": 3, "end": 40, "id": "Q90"}], "triplets": []}
        )
    with pytest.raises(ValueError, match="relation vocabulary|entity vocabulary"):
        model.set_knowledge_assets(type(assets).build(["Q90"]))
    with pytest.raises(ValueError, match="out of range"):
        KalaConfig(encoder_config=tiny_encoder_config(tokenizer), kfm_layers=[5])


def test_batch_without_entities_runs_and_keeps_kfm_in_graph(tokenizer, assets, processor):
    model = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3).train()
    batch = batch_of(processor, ["is a the of", "who was"])
    assert batch["node_entity_ids"].numel() == 0
    out = model(**batch, labels=torch.zeros_like(batch["input_ids"]))
    out.loss.backward()
    unused = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not unused, unused


@pytest.mark.parametrize("mode", ["pointwise", "relational"])
def test_gamma_beta_on_the_nodes_tokens_read_equals_all_nodes(tokenizer, assets, processor, mode, monkeypatch):
    """On the CPU the γ/β MLPs run only on graph nodes some token reads (neighbour-only nodes are skipped): logits
    and gradients equal the all-nodes computation used on other devices and under torch.compile."""
    from keplm.modeling.modeling_kala import _KnowledgeState

    model = make_model(KalaForTokenClassification, tokenizer, assets, mode, num_labels=3, kfm_layers=[0, -1]).train()
    model.config.knowledge_dropout = 0.0
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    batch = batch_of(processor, TEXTS)
    read = batch["entity_token_map"][batch["entity_token_map"] >= 0].unique()
    assert 0 < read.numel() < batch["node_entity_ids"].numel()  # some nodes are neighbours only
    rows_seen = []
    original = _KnowledgeState.read_rows

    def spy(state):
        rows_seen.append(original(state)[0])
        return rows_seen[-1], original(state)[1]

    def run():
        model.zero_grad()
        out = model(**batch, labels=torch.zeros_like(batch["input_ids"]))
        out.loss.backward()
        return out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    monkeypatch.setattr(_KnowledgeState, "read_rows", spy)
    logits, grads = run()
    assert torch.equal(rows_seen[0], read)
    monkeypatch.setattr(_KnowledgeState, "read_rows", lambda state: (None, state.token_node_index))
    all_logits, all_grads = run()
    torch.testing.assert_close(logits, all_logits, rtol=1e-5, atol=1e-5)
    assert grads.keys() == all_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], all_grads[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("mode", ["pointwise", "relational"])
def test_inference_without_mention_tokens_skips_the_knowledge_layers_exactly(
    tokenizer, assets, processor, mode, monkeypatch
):
    """An inference batch on the CPU whose tokens are in no mention skips retrieval and the γ/β MLPs: the logits are
    those of the full computation (taken with gradients on), bit for bit; a batch with a mention still runs them."""
    model = make_model(KalaForTokenClassification, tokenizer, assets, mode, num_labels=3, kfm_layers=[0, -1])
    free = batch_of(processor, ["is a the of", "who was"])
    assert not (free["entity_token_map"] >= 0).any()
    with torch.enable_grad():
        full = model(**free)
    calls = []
    layer = model.base_model.knowledge_layers["0"]
    monkeypatch.setattr(layer, "forward", lambda *a, **k: calls.append(1) or type(layer).forward(layer, *a, **k))
    with torch.no_grad():
        skipped = model(**free)
    assert calls == [] and torch.equal(skipped.logits, full.logits.detach())
    with torch.no_grad():
        model(**batch_of(processor, TEXTS[:1]))
    assert calls == [1]


def test_tiny_model_learns_a_task_only_knowledge_can_solve(tokenizer, assets):
    """Mentions have identical surface tokens; only the entity (memory row) tells the label."""
    torch.manual_seed(0)
    num = 8
    rows = torch.arange(1, 1 + num)
    labels_of = (rows % 2) + 1  # entity type: 1 or 2

    def make_batch(size):
        pick = torch.randint(0, num, (size,))
        input_ids = torch.full((size, 6), tokenizer.convert_tokens_to_ids("is"))
        input_ids[:, 0], input_ids[:, -1] = tokenizer.cls_token_id, tokenizer.sep_token_id
        input_ids[:, 2] = tokenizer.unk_token_id
        token_map = torch.full((size, 6), -1)
        token_map[:, 2] = torch.arange(size)
        labels = torch.zeros((size, 6), dtype=torch.long)
        labels[:, 2] = labels_of[pick]
        return {
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids),
            "entity_token_map": token_map,
            "node_entity_ids": rows[pick],
            "edge_index": torch.zeros(2, 0, dtype=torch.long),
            "edge_relation_ids": torch.zeros(0, dtype=torch.long),
            "labels": labels,
        }

    accuracy = {}
    for mode in ("pointwise", "none"):
        model = make_model(KalaForTokenClassification, tokenizer, assets, mode, num_labels=3).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        for _ in range(60):
            loss = model(**make_batch(16)).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        test = make_batch(64)
        with torch.no_grad():
            predictions = model(**test).logits.argmax(-1)[:, 2]
        accuracy[mode] = (predictions == test["labels"][:, 2]).float().mean().item()
    assert accuracy["pointwise"] > 0.95, accuracy
    assert accuracy["none"] < 0.8, accuracy


def test_a_tag_or_class_id_outside_the_label_set_is_a_value_error_naming_it(tokenizer, assets, processor):
    """Labels given through the API are checked against the model's label count (-100 ignored), for KALA's tags and
    Roof-Transformer's classes; a regression's float scores are not ids."""
    from keplm import RoofTransformerConfig, RoofTransformerForSequenceClassification

    from .conftest import tiny_encoder_config

    model = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3)
    batch = batch_of(processor, TEXTS[:1])
    labels = torch.full_like(batch["input_ids"], -100)
    labels[0, 1], labels[0, 2] = 2, 7
    with pytest.raises(ValueError, match=r"labels hold id 7 outside \[0, 3\)"):
        model(**batch, labels=labels)
    labels[0, 2] = 0
    assert model(**batch, labels=labels).loss is not None

    def text_only_roof(num_labels: int):  # no knowledge encoding or fusion: the label check needs the text alone
        config = RoofTransformerConfig(
            encoder_config=tiny_encoder_config(tokenizer),
            fusion_layers=1,
            max_knowledge_length=40,
            num_labels=num_labels,
            knowledge_encoding="none",
            fusion="none",
        )
        return RoofTransformerForSequenceClassification(config)

    roof = text_only_roof(2)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    with pytest.raises(ValueError, match=r"labels hold id -1 outside \[0, 2\)"):
        roof(**inputs, labels=torch.tensor([-1]))
    regression = text_only_roof(1)
    assert regression(**inputs, labels=torch.tensor([3.5])).loss is not None
