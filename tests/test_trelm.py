"""TRELM's mechanisms against hand computations, and the model's save / load / Auto / fill-mask behaviour."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForMaskedLM, pipeline

import keplm  # noqa: F401  (registers the Auto classes)
from keplm import KnowledgeAnnotation, KnowledgeAssets, KnowledgeGraph, TrelmConfig, TrelmForMaskedLM, TrelmProcessor
from keplm.data.collator import KeplmDataCollator
from keplm.data.masking import MaskedLMCollator
from keplm.knowledge.importance import importance_score, select_important, semantic_importance
from keplm.modeling.knowledge_routing import RoutedLinear, integrated_gradients
from keplm.modeling.trelm_modules import ContrastiveKnowledgeLoss, MemoryBank, NegativeSampler

from .conftest import tiny_encoder_config

TEXT = "john visited paris in france ."
ANNOTATION = {
    "entities": [
        {"text": "paris", "start": 13, "end": 18, "id": "Q90"},
        {"text": "france", "start": 22, "end": 28, "id": "Q142"},
    ],
    "triplets": [{"h": "Q90", "r": "P17", "t": "Q142"}],
}


def with_kge(kg) -> KnowledgeAssets:
    """The toy KG with 4-d KG embeddings, and an entity vocabulary over its entities but Q999."""
    vectors = np.random.default_rng(0).normal(size=(kg.num_entities, 4)).astype(np.float32)
    with_vectors = kg.replace(entity_vectors=vectors)
    seen = ["Q90", "Q142", "Q64", "Q183", "Q84", "Q21", "Q515", "Q1471", "Q60", "Q30"]
    return KnowledgeAssets.build(seen + ["Q90", "Q142"], kg=with_vectors)


def make_model(tokenizer, assets, **kwargs) -> TrelmForMaskedLM:
    torch.manual_seed(0)
    config = TrelmConfig(
        encoder_config=tiny_encoder_config(tokenizer),
        entity_vocab_size=assets.num_entities,
        **{"kge_dim": 4, "memory_window": 1, "routing_fraction": 0.25, "routing_steps": 4, **kwargs},
    )
    model = TrelmForMaskedLM(config)
    model.set_knowledge_assets(assets)
    return model


def features(processor, texts=(TEXT,), annotations=(ANNOTATION,), **kwargs):
    return processor.prepare_pretraining_features({"text": list(texts), "knowledge": list(annotations)}, **kwargs)


# ------------------------------------------------------------------------------------------------ 3.1 importance
def test_semantic_importance_is_the_inverse_cosine_of_eq_1(tokenizer):
    assert float(importance_score(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 1.0]))) == pytest.approx(2**0.5)
    assert float(importance_score(torch.tensor([1.0, 2.0]), torch.tensor([2.0, 4.0]))) == pytest.approx(1.0)
    assert importance_score(torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 0.0])) == float("inf")
    torch.manual_seed(0)
    from transformers import BertModel

    encoder = BertModel(tiny_encoder_config(tokenizer), add_pooling_layer=False).eval()
    annotation = KnowledgeAnnotation.from_dict(ANNOTATION)
    scores = semantic_importance(encoder, tokenizer, [TEXT], [annotation], batch_size=2)

    def represent(text):  # by hand: mean of the last hidden states
        encoding = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            return encoder(**encoding).last_hidden_state[0].mean(0)

    original = represent(TEXT)
    for k, mention in enumerate(annotation.entities):
        replaced = represent(TEXT[: mention.start] + "[MASK]" + TEXT[mention.end :])
        expected = float(original.norm() * replaced.norm() / (original @ replaced))
        assert scores[0][k] == pytest.approx(expected, rel=1e-5)


def test_selection_rules_pick_important_and_long_tail_mentions():
    scores = [[1.0, 3.0], [2.0, 4.0]]
    ids = [["a", "b"], ["c", None]]
    counts = {"a": 10, "b": 1, "c": 1}
    flags, report = select_important(scores, ids, counts, rule="si", si_quantile=0.5)
    assert flags == [[False, True], [False, False]]  # SI >= 2.5; the id-less mention never
    flags, _ = select_important(scores, ids, counts, rule="long_tail", long_tail_quantile=0.5)
    assert flags == [[False, True], [True, False]]
    flags, report = select_important(scores, ids, counts, rule="si_long_tail", si_quantile=0.25)
    assert flags == [[False, True], [True, False]] and report["selected"] == 2
    with pytest.raises(ValueError, match="rule must be one of"):
        select_important(scores, ids, counts, rule="frequent")


# ------------------------------------------------------------------------------------------------ eq. 2
def test_cka_loss_matches_a_hand_computation():
    torch.manual_seed(0)
    states, weight, bias = torch.randn(2, 3), torch.randn(10, 3), torch.randn(10)
    targets, negatives = torch.tensor([1, 4]), torch.tensor([[2, 3], [4, 7]])  # the second row repeats its target
    loss = ContrastiveKnowledgeLoss()(states, targets, negatives, weight, bias)

    def f(h, y):
        return float(h @ weight[y] + bias[y])

    first = -np.log(np.exp(f(states[0], 1)) / sum(np.exp(f(states[0], y)) for y in (1, 2, 3)))
    second = -np.log(np.exp(f(states[1], 4)) / sum(np.exp(f(states[1], y)) for y in (4, 7)))
    assert float(loss) == pytest.approx((first + second) / 2, rel=1e-5)


def test_negative_sampler_draws_same_position_tokens_of_other_entities():
    sampler = NegativeSampler(vocab_size=50, mode="frequency")
    names = torch.tensor([[0, 0, 0], [11, 12, 13], [21, 0, 0], [31, 32, 0]])
    sampler.set_entities(names, torch.tensor([0, 3, 1, 2]), torch.tensor([0, 0, 5, 5]))
    torch.manual_seed(0)
    drawn = sampler(torch.tensor([0, 1, 2]), 50)
    assert set(drawn[0].tolist()) <= {21, 31} and set(drawn[1].tolist()) <= {21, 32}  # count-0 entity never drawn
    assert set(drawn[2].tolist()) <= {21, 32}  # a shorter name gives its last token
    with pytest.raises(ValueError, match="no entity has a tokenised name"):
        sampler.set_entities(names, torch.zeros(4, dtype=torch.long), torch.ones(4, dtype=torch.long))


# ------------------------------------------------------------------------------------------------ 3.2 memory bank
def test_memory_bank_updates_and_lambda_schedule():
    bank = MemoryBank(entity_vocab_size=3, hidden_size=2, window=1, momentum=0.5, lam=0.5, decay=2.0)
    hidden = torch.tensor([[[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0], [9.0, 9.0]]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    entity = torch.tensor([[0, 0, 1, 1, 0, 0]])
    mention = torch.tensor([[-1, -1, 0, 0, -1, -1]])
    assert bank.update(hidden, mask, entity, mention) == 1
    # eq. 4: window tokens 1..4 (k = 1 around 2..3); the padding (9) never counts
    torch.testing.assert_close(bank.local[1], torch.tensor([2.5, 2.5]))
    torch.testing.assert_close(bank.global_sum[1], torch.tensor([0.0, 0.0]))  # [CLS] state of the context
    bank.update(hidden + 1.0, mask, entity, mention)
    torch.testing.assert_close(bank.local[1], torch.tensor([3.0, 3.0]))  # eq. 5 with γ = 0.5
    memory, known = bank.read(torch.tensor([[1, 2, 0]]))
    assert known.tolist() == [[True, False, False]]
    torch.testing.assert_close(memory[0, 0], torch.tensor([3.5, 3.5]))  # local 3 + global mean (0 + 1) / 2
    assert [bank.set_epoch(q) for q in range(3)] == [0.5, 0.25, 0.125]  # eq. 8 with β = 2
    state = bank.training_state()
    other = MemoryBank(3, 2, 1, 0.5, 0.5, 2.0)
    other.load_training_state(state)
    torch.testing.assert_close(other.local, bank.local) and torch.testing.assert_close(
        other.global_sum, bank.global_sum
    )
    assert other.lam == 0.125
    with pytest.raises(ValueError, match="another entity vocabulary"):
        MemoryBank(4, 2, 1, 0.5, 0.5, 2.0).load_training_state(state)


def test_memory_bank_folds_repeated_mentions_as_one_by_one_in_order():
    """Eq. 5 applied at once for a batch equals folding its mentions one after the other, in mention order, for
    entities met several times, seen before or not."""
    torch.manual_seed(0)
    bank = MemoryBank(entity_vocab_size=5, hidden_size=3, window=1, momentum=0.3, lam=0.5, decay=2.0)
    bank.local[2] = torch.tensor([1.0, -1.0, 2.0])
    bank.seen[2] = True
    entities = torch.tensor([2, 3, 2, 4, 3, 2, 1])
    values = torch.randn(len(entities), 3)
    expected, seen = bank.local.clone(), bank.seen.clone()
    for e, x in zip(entities.tolist(), values):
        expected[e] = (1 - 0.3) * expected[e] + 0.3 * x if seen[e] else x
        seen[e] = True
    bank._fold_local(entities, values)
    torch.testing.assert_close(bank.local, expected)
    assert bank.seen.tolist() == seen.tolist() == [False, True, True, True, True]


# ------------------------------------------------------------------------------------------------ eq. 7 injection
def test_injection_changes_only_the_selected_positions(tokenizer, kge_assets):
    model = make_model(tokenizer, kge_assets).eval()
    processor = TrelmProcessor(tokenizer, kge_assets)
    batch = {
        k: torch.tensor(v)
        for k, v in features(processor, knowledge_targets=False).items()
        if k not in ("special_tokens_mask", "cka_labels", "cka_token_index")
    }
    seen = {}
    model.trelm.encoder.embeddings.register_forward_hook(
        lambda m, args, kwargs, out: seen.update(embeds=kwargs["inputs_embeds"]), with_kwargs=True
    )
    with torch.no_grad():
        model(**batch)
    words = model.trelm.encoder.embeddings.word_embeddings(batch["input_ids"])
    inject = batch["inject_mask"].bool()
    assert inject.sum() == 2  # "paris" and "france"
    assert torch.equal(seen["embeds"][~inject], words[~inject])
    injection = model.trelm.injection
    rows = batch["entity_ids"][inject]
    with torch.no_grad():
        torch.testing.assert_close(seen["embeds"][inject], injection.projection(injection.kge[rows]))


def test_processor_marks_tail_targets_and_injects_the_head(tokenizer, kge_assets):
    processor = TrelmProcessor(tokenizer, kge_assets)
    out = features(processor)
    tokens = tokenizer.convert_ids_to_tokens(out["input_ids"][0])
    paris, france = tokens.index("paris"), tokens.index("france")
    assert out["inject_mask"][0][paris] == 1 and out["inject_mask"][0][france] == 0  # the tail is decoded
    assert out["cka_labels"][0][france] == out["input_ids"][0][france]
    assert sum(t != -100 for t in out["cka_labels"][0]) == 1
    assert out["entity_ids"][0][paris] == kge_assets.entity_row("Q90")
    flags = features(processor, important_column="important", **{})
    assert flags["inject_mask"] == out["inject_mask"]  # no importance column: every mention is important
    unimportant = processor.prepare_pretraining_features(
        {"text": [TEXT], "knowledge": [ANNOTATION], "important": [[False, True]]}
    )
    assert sum(unimportant["inject_mask"][0]) == 0
    with pytest.raises(ValueError, match="1 importance flags for 2 mentions"):
        processor.prepare_pretraining_features({"text": [TEXT], "knowledge": [ANNOTATION], "important": [[True]]})


def test_entities_without_kg_embedding_are_never_injected_and_counted(tokenizer, kg, kge_assets):
    vectors = kge_assets.kg.entity_vectors.copy()
    assets = KnowledgeAssets(
        kge_assets.entity_vocab + ["Q999"], kge_assets.relation_vocab, kge_assets.entity_counts + [1], kge_assets.kg
    )
    model = make_model(tokenizer, assets)
    assert model.kge_coverage == {"entities": assets.num_entities - 1, "with_kg_embedding": assets.num_entities - 1}
    partial = KnowledgeGraph(
        kg.entity_ids, kg.relation_ids, kg.triples, entity_names=kg.entity_names, entity_vectors=vectors
    )
    missing = KnowledgeAssets(["[NULL]", "Q90", "Q404"], kge_assets.relation_vocab, [0, 1, 1], partial)
    model = make_model(tokenizer, missing)
    assert model.kge_coverage == {"entities": 2, "with_kg_embedding": 1}
    assert model.trelm.injection.has_kge.tolist() == [False, True, False]
    words = torch.zeros(1, 2, 32)
    out = model.trelm.injection(words, torch.tensor([[2, 1]]), torch.tensor([[True, True]]))
    assert torch.equal(out[0, 0], words[0, 0]) and not torch.equal(out[0, 1], words[0, 1])


# ------------------------------------------------------------------------------------------------ batches
def masked_batch(tokenizer, assets, count: int, mlm_probability: float):
    """``count`` copies of TEXT, featurized and masked (seed 0), with the rows they came from."""
    processor = TrelmProcessor(tokenizer, assets)
    out = features(processor, texts=[TEXT] * count, annotations=[ANNOTATION] * count)
    rows = [{k: v[i] for k, v in out.items()} for i in range(count)]
    collator = MaskedLMCollator(
        KeplmDataCollator.from_processor(processor),
        tokenizer.mask_token_id,
        len(tokenizer),
        mlm_probability=mlm_probability,
    )
    torch.manual_seed(0)
    return processor, rows, collator(rows)


def test_masking_collator_always_masks_targets_and_never_injected_or_special_tokens(tokenizer, kge_assets):
    processor, rows, batch = masked_batch(tokenizer, kge_assets, 8, 0.9)
    targets = batch["cka_labels"] != -100
    assert (batch["input_ids"][targets] == tokenizer.mask_token_id).all()
    assert (batch["labels"][targets] == batch["cka_labels"][targets]).all()
    assert (batch["labels"][batch["inject_mask"].bool()] == -100).all()
    special = torch.tensor([r["special_tokens_mask"] for r in rows]).bool()
    assert (batch["labels"][special] == -100).all() and "special_tokens_mask" not in batch
    assert (batch["labels"] != -100).sum() > targets.sum()  # ordinary tokens too
    plain = MaskedLMCollator(
        KeplmDataCollator.from_processor(processor),
        tokenizer.mask_token_id,
        len(tokenizer),
        mask_knowledge_targets=False,
    )(rows)
    assert "cka_labels" not in plain
    with pytest.raises(ValueError, match="mlm_probability"):
        MaskedLMCollator(KeplmDataCollator(), 4, 10, mlm_probability=1.0)


# ------------------------------------------------------------------------------------------------ 3.3 routing
def test_integrated_gradients_riemann_sum_in_closed_form():
    w = torch.tensor([1.0, -2.0, 0.5])
    v = torch.tensor([[1.0, 2.0, 3.0]])
    steps = 20
    (attribution,) = integrated_gradients(lambda scaled: (w * scaled[0] ** 2).sum(dim=(1, 2)), [v], steps)
    # d/dv of w v² at (k/m) v̄ is 2 w (k/m) v̄; the mean over k of k/m is (m + 1) / (2m)
    torch.testing.assert_close(attribution, w * v**2 * (steps + 1) / steps)
    calls = []

    def function(scaled):
        calls.append(scaled[0].shape[0])
        return (w * scaled[0] ** 2).sum(dim=(1, 2))

    for batch_steps in (1, 3, 20):  # the same Riemann sum in passes of batch_steps scales (the last one shorter)
        calls.clear()
        (chunked,) = integrated_gradients(function, [v], steps, batch_steps)
        torch.testing.assert_close(chunked, attribution)
        assert sum(calls) == steps and max(calls) == batch_steps
    with pytest.raises(ValueError, match="batch_steps must be >= 1"):
        integrated_gradients(function, [v], steps, 0)


def test_router_attribution_batched_equals_sequential_riemann_steps(tokenizer, kge_assets):
    model = make_model(tokenizer, kge_assets, use_memory_bank=False).eval()
    processor = TrelmProcessor(tokenizer, kge_assets)
    out = features(processor)
    batch = {k: torch.tensor(v) for k, v in out.items() if k != "special_tokens_mask"}
    router = model.enable_knowledge_routing()
    rows, cols, tokens = model.routing_targets(batch["cka_labels"], None)
    negatives = torch.tensor([[5, 6, 7]])
    scores = router.attribute(
        lambda: model.knowledge_probability(batch, rows, cols, tokens, negatives),
        (rows, cols),
        4,
        lambda m: lambda: model.knowledge_probability(batch, rows, cols, tokens, negatives, repeat=m),
    )
    # by hand: one pass per step k, every layer's activation at the target scaled by k/m, gradients summed
    recorded = []
    handles = [
        layer.intermediate.register_forward_hook(lambda m, a, o: recorded.append(o[rows, cols].detach()))
        for layer in model.trelm.encoder.encoder.layer
    ]
    with torch.no_grad():
        model.knowledge_probability(batch, rows, cols, tokens, negatives)
    for h in handles:
        h.remove()
    total = [torch.zeros_like(r) for r in recorded]
    for k in range(1, 5):
        scaled = [(k / 4 * r).requires_grad_() for r in recorded]

        def hook(i, scaled=scaled):
            def replace(m, a, o):
                o = o.clone()
                o[rows, cols] = scaled[i]
                return o

            return replace

        handles = [
            layer.intermediate.register_forward_hook(hook(i))
            for i, layer in enumerate(model.trelm.encoder.encoder.layer)
        ]
        p = model.knowledge_probability(batch, rows, cols, tokens, negatives).sum()
        for h in handles:
            h.remove()
        for t, g in zip(total, torch.autograd.grad(p, scaled)):
            t += g
    for score, r, t in zip(scores, recorded, total):
        torch.testing.assert_close(score, (r * t / 4).sum(0), rtol=1e-4, atol=1e-5)
    # the config's routing_batch_steps: the same scores from passes of 3 + 1 scales
    chunked = router.attribute(
        lambda: model.knowledge_probability(batch, rows, cols, tokens, negatives),
        (rows, cols),
        4,
        lambda m: lambda: model.knowledge_probability(batch, rows, cols, tokens, negatives, repeat=m),
        batch_steps=3,
    )
    for score, other in zip(scores, chunked):
        torch.testing.assert_close(other, score, rtol=1e-4, atol=1e-5)


def test_routing_updates_only_knowledge_paths_and_keeps_no_state_for_the_rest(tokenizer, kge_assets):
    model = make_model(tokenizer, kge_assets).train()
    processor = TrelmProcessor(tokenizer, kge_assets)
    model.set_cka_entities(*processor.entity_name_table())
    rows = [{k: v[0] for k, v in features(processor).items()}] * 4
    collator = MaskedLMCollator(KeplmDataCollator.from_processor(processor), tokenizer.mask_token_id, len(tokenizer))
    torch.manual_seed(0)
    batch = collator(rows)
    router = model.enable_knowledge_routing()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    from types import SimpleNamespace

    assert model.before_training_step(batch, SimpleNamespace(global_step=0), optimizer)["routing_targets"] > 0
    model(**batch).loss.backward()
    optimizer.step()
    router.fold()
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained and all(n.startswith(("lm_head.transform", "trelm.injection")) or ".route_" in n for n in trained)
    assert not any(id(p) in {id(q) for q in optimizer.state} for n, p in model.named_parameters() if n not in trained)
    for name, parameter in model.named_parameters():
        if ".route_" in name or name in trained:
            continue
        if (
            name.endswith(("intermediate.dense.weight", "intermediate.dense.bias", "output.dense.weight"))
            and ".attention." not in name
        ):
            layer = next(m for n, m in model.named_modules() if f"{n}.weight" == name or f"{n}.bias" == name)
            assert isinstance(layer, RoutedLinear)
            index = layer.route_index
            changed = parameter != before[name]
            axis_changed = (
                changed.any(dim=1)
                if (layer.axis == "out" and parameter.dim() == 2)
                else (changed if parameter.dim() == 1 else changed.any(dim=0))
            )
            assert set(axis_changed.nonzero().flatten().tolist()) <= set(index.tolist())  # routed rows only
            assert axis_changed.any() or parameter.dim() == 1
        else:
            assert torch.equal(parameter, before[name]), name  # everything off the knowledge paths: bit-identical


# ------------------------------------------------------------------------------------------------ save / load
def test_save_load_auto_round_trip_and_fill_mask(tmp_path, tokenizer, kge_assets):
    model = make_model(tokenizer, kge_assets).eval()
    processor = TrelmProcessor(tokenizer, kge_assets)
    router = model.enable_knowledge_routing()
    with torch.no_grad():
        for p in router.delta_parameters():
            p.normal_()
    batch = {
        k: torch.tensor(v)
        for k, v in features(processor).items()
        if k not in ("special_tokens_mask", "cka_labels", "cka_token_index")
    }
    with torch.no_grad():
        expected = model(**batch).logits
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    from safetensors.torch import load_file

    assert not [k for k in load_file(tmp_path / "model.safetensors") if ".route_" in k]  # deltas folded in
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, TrelmForMaskedLM) and loaded.knowledge_assets.kg.entity_vectors is not None
    bank = loaded.trelm.memory_bank  # training state, not saved: a loaded model starts with an empty bank
    assert not bank.seen.any() and not bank.local.any() and not bank.global_count.any()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, expected)
    fill = pipeline("fill-mask", model=str(tmp_path), top_k=3)
    answers = fill("john visited [MASK] in france .")
    assert len(answers) == 3 and all("token_str" in a for a in answers)


@pytest.mark.parametrize("theta", [0.2, 0.9])
def test_total_loss_mixes_mlm_and_cka_by_theta(tokenizer, kge_assets, theta):
    """Eq. 3 at θ ≠ 0.5 (where a swapped or constant mix would still pass): the total loss is θ·MLM + (1−θ)·CKA of
    the same forward, in training mode with knowledge targets masked."""
    _, _, batch = masked_batch(tokenizer, kge_assets, 4, 0.5)
    model = make_model(tokenizer, kge_assets, cka_weight=theta).train()
    output = model(**batch)
    assert output.cka_loss is not None and float(output.cka_loss) != pytest.approx(float(output.mlm_loss))
    expected = theta * output.mlm_loss + (1 - theta) * output.cka_loss
    torch.testing.assert_close(output.loss, expected)
