"""KALA with other encoders, base-checkpoint loading, gradient checkpointing, DataLoader workers."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader
from transformers import BertModel, RobertaConfig

from keplm import KalaConfig, KalaForQuestionAnswering, KalaForTokenClassification, KalaProcessor
from keplm.data.collator import KeplmDataCollator
from keplm.knowledge import KnowledgeAssets

from .conftest import tiny_encoder_config

TEXTS = ["john visited paris and unknownia in france .", "berlin is a city", "mary works for acme bank in london ."]


def test_roberta_style_encoder(tokenizer, assets):
    encoder_config = RobertaConfig(
        vocab_size=len(tokenizer) + 2,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=48,
        max_position_embeddings=130,
        pad_token_id=0,
        type_vocab_size=1,
    )
    config = KalaConfig(
        encoder_config=encoder_config,
        entity_vocab_size=assets.num_entities,
        num_relations=assets.num_relations,
        num_labels=3,
        kfm_layers=[0, -1],
    )
    model = KalaForTokenClassification(config).eval()
    processor = KalaProcessor(tokenizer, assets)
    features = [processor(t) for t in TEXTS]
    for f in features:
        f.pop("token_type_ids")
    batch = KeplmDataCollator.from_processor(processor)(features)
    assert model(**batch).logits.shape == (3, batch["input_ids"].shape[1], 3)
    assert type(model.kala.encoder).__name__ == "RobertaModel"


def test_from_base_pretrained_keeps_encoder_weights_and_reports_new_modules(tmp_path, tokenizer, assets):
    torch.manual_seed(1)
    base = BertModel(tiny_encoder_config(tokenizer))
    base.save_pretrained(tmp_path / "base")
    model = KalaForQuestionAnswering.from_base_pretrained(tmp_path / "base", knowledge_assets=assets)
    for name, tensor in base.state_dict().items():
        if not name.startswith("pooler."):
            assert torch.equal(model.kala.encoder.state_dict()[name], tensor), name
    report = model.loading_report
    assert "qa_outputs" in report["newly_initialized"]
    assert any(name.startswith("kala.entity_memory") for name in report["newly_initialized"])
    assert model.config.entity_vocab_size == assets.num_entities
    assert model.knowledge_assets is assets


def test_gradient_checkpointing_matches(tokenizer, assets):
    torch.manual_seed(0)
    model = _tagger(tokenizer, assets, kfm_layers=[0, 1], knowledge_dropout=0.0).train()
    processor = KalaProcessor(tokenizer, assets)
    batch = KeplmDataCollator.from_processor(processor)([processor(t) for t in TEXTS])
    labels = torch.ones_like(batch["input_ids"])
    grads = []
    for checkpointing in (False, True):
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.zero_grad()
        torch.manual_seed(1)  # the same entity-dropout draw in both passes; recomputed layers must reuse it
        model(**batch, labels=labels).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-5), name


def test_collator_in_dataloader_workers(tokenizer, assets):
    processor = KalaProcessor(tokenizer, assets)
    features = [processor(t) for t in TEXTS * 4]
    collator = KeplmDataCollator.from_processor(processor, entity_vocab_size=assets.num_entities)
    loader = DataLoader(features, batch_size=4, collate_fn=collator, num_workers=2)
    batches = list(loader)
    assert len(batches) == 3
    for batch in batches:
        assert batch["entity_token_map"].max() < batch["node_entity_ids"].shape[0]


def test_entity_vocabulary_frequency_pruning(kg):
    mentions = ["Q90"] * 5 + ["Q64"] * 2 + ["Q84"]
    assets = KnowledgeAssets.build(mentions, kg=kg, min_count=2)
    assert assets.entity_vocab == ["[NULL]", "Q90", "Q64"]
    assert assets.entity_row("Q84") == 0  # pruned: treated as unseen
    assert KnowledgeAssets.build(mentions, max_entities=1).entity_vocab == ["[NULL]", "Q90"]


def _tagger(tokenizer, assets, **settings) -> KalaForTokenClassification:
    """A tiny KALA tagger (3 labels) over ``assets``; ``settings``: more config fields."""
    config = KalaConfig(
        encoder_config=tiny_encoder_config(tokenizer),
        entity_vocab_size=assets.num_entities,
        num_relations=assets.num_relations,
        num_labels=3,
        **settings,
    )
    return KalaForTokenClassification(config)


def _trainer(tmp_path, model, lr_scheduler_type="linear", **options):
    from transformers import TrainingArguments

    from keplm.training.trainer import KeplmTrainer

    args = TrainingArguments(
        output_dir=str(tmp_path),
        learning_rate=1e-4,
        weight_decay=0.01,
        report_to="none",
        use_cpu=True,
        lr_scheduler_type=lr_scheduler_type,
        warmup_steps=0,
    )
    trainer = KeplmTrainer(model=model, args=args, parameter_group_options=options)
    trainer.create_optimizer_and_scheduler(num_training_steps=10)
    return trainer


def test_sparse_entity_memory_trains_with_sparse_adam_and_only_batch_rows_move(tmp_path, tokenizer, assets):
    """A sparse entity memory gets SparseAdam through the model's parameter groups; only the batch's rows move,
    the LR schedule reaches both optimizers and the combined state round-trips."""
    from keplm.training.optim import CombinedOptimizer

    torch.manual_seed(0)
    model = _tagger(tokenizer, assets, sparse_entity_memory=True).train()
    trainer = _trainer(tmp_path, model)
    optimizer = trainer.optimizer
    assert isinstance(optimizer, CombinedOptimizer) and isinstance(optimizer.others[0], torch.optim.SparseAdam)
    trainer.lr_scheduler.step()
    assert {round(g["lr"], 12) for g in optimizer.param_groups} == {9e-5}  # the schedule reaches both optimizers
    processor = KalaProcessor(tokenizer, assets)
    batch = KeplmDataCollator.from_processor(processor)([processor("john visited paris .")])
    memory = model.kala.entity_memory.embeddings.weight
    before = memory.detach().clone()
    model(**batch, labels=torch.ones_like(batch["input_ids"])).loss.backward()
    assert memory.grad.is_sparse
    optimizer.step()
    optimizer.zero_grad()
    moved = (memory.detach() != before).any(-1).nonzero().flatten().tolist()
    touched = sorted(set(batch["node_entity_ids"].tolist()) - {0})  # paris and its KG neighbours
    assert assets.entity_row("Q90") in touched and len(touched) < assets.num_entities - 1
    assert moved == touched  # only rows of the batch's graph nodes changed
    state = optimizer.state_dict()
    optimizer.load_state_dict(state)


def test_rowwise_adagrad_matches_its_formula_for_sparse_and_dense_gradients():
    from keplm.training.optim import RowwiseAdagrad

    torch.manual_seed(0)
    weights = {kind: torch.nn.Parameter(torch.randn(6, 4)) for kind in ("sparse", "dense")}
    start = weights["dense"].detach().clone()
    weights["sparse"].data.copy_(start)
    optimizers = {kind: RowwiseAdagrad([w], lr=0.1, eps=1e-8) for kind, w in weights.items()}
    expected, accumulator = start.clone(), torch.zeros(6)
    for rows in ([1, 3, 3], [0, 3]):  # row 3 twice in one step: its gradients add up
        grad_rows = torch.randn(len(rows), 4)
        dense = torch.zeros(6, 4).index_add_(0, torch.tensor(rows), grad_rows)
        weights["sparse"].grad = torch.sparse_coo_tensor(torch.tensor([rows]), grad_rows, (6, 4))
        weights["dense"].grad = dense.clone()
        for optimizer in optimizers.values():
            optimizer.step()
        touched = sorted(set(rows))
        accumulator[touched] += dense[touched].pow(2).mean(1)
        expected[touched] -= 0.1 * dense[touched] / (accumulator[touched].sqrt() + 1e-8).unsqueeze(1)
    for kind, weight in weights.items():
        torch.testing.assert_close(weight.detach(), expected, msg=kind)
        assert torch.equal(weight.detach()[[2, 4, 5]], start[[2, 4, 5]])  # rows never in a batch do not move
        state = optimizers[kind].state[weight]["sum"]
        assert state.shape == (6,) and state.dtype == torch.float32  # one value per row
    with pytest.raises(ValueError, match="2-d"):
        RowwiseAdagrad([torch.nn.Parameter(torch.zeros(3))])


def test_clip_grad_norm_sparse_equals_torch_clipping_of_the_dense_gradients():
    from keplm.training.optim import clip_grad_norm_sparse_

    torch.manual_seed(0)
    table, other = torch.nn.Parameter(torch.zeros(5, 3)), torch.nn.Parameter(torch.zeros(4))
    rows, values = torch.tensor([[1, 3, 1]]), torch.randn(3, 3)
    dense_table = torch.zeros(5, 3).index_add_(0, rows[0], values)
    table.grad, other.grad = torch.sparse_coo_tensor(rows, values, (5, 3)), torch.randn(4)
    reference = [torch.nn.Parameter(torch.zeros(5, 3)), torch.nn.Parameter(torch.zeros(4))]
    reference[0].grad, reference[1].grad = dense_table.clone(), other.grad.clone()
    want = torch.nn.utils.clip_grad_norm_(reference, 0.5)
    got = clip_grad_norm_sparse_([table, other], 0.5)
    torch.testing.assert_close(got, want)
    assert want > 0.5  # clipping happened
    torch.testing.assert_close(table.grad.to_dense(), reference[0].grad)
    torch.testing.assert_close(other.grad, reference[1].grad)


def test_clip_grad_norm_sparse_totals_half_precision_gradients_in_float32():
    """float16 gradients whose norms add up past float16's range (65504) still clip by their float32 total, not by an
    inf total that would scale them all to 0; the returned norm is float32 for every gradient dtype."""
    from keplm.training.optim import clip_grad_norm_sparse_

    table = torch.nn.Parameter(torch.zeros(5, 4, dtype=torch.float16))
    table.grad = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.full((2, 4), 3000.0), (5, 4)).half()
    dense = [torch.nn.Parameter(torch.zeros(100, dtype=torch.float16)) for _ in range(30)]
    for p in dense:
        p.grad = torch.full((100,), 3000.0, dtype=torch.float16)
    got = clip_grad_norm_sparse_([table, *dense], 1.0)
    want = torch.tensor(3000.0) * (2 * 4 + 30 * 100) ** 0.5
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-3, atol=0.0)
    scaled = float(3000.0 / want)
    torch.testing.assert_close(dense[0].grad.float(), torch.full((100,), scaled), rtol=1e-2, atol=0.0)
    torch.testing.assert_close(table.grad.values().float(), torch.full((2, 4), scaled), rtol=1e-2, atol=0.0)
    # one gradient whose own norm is past float16's range (100 * 10000^2 > 65504^2)
    big = torch.nn.Parameter(torch.zeros(100, dtype=torch.float16))
    big.grad = torch.full((100,), 10000.0, dtype=torch.float16)
    torch.testing.assert_close(clip_grad_norm_sparse_([big], 1.0), torch.tensor(100000.0), rtol=1e-3, atol=0.0)
    torch.testing.assert_close(big.grad.float(), torch.full((100,), 0.1), rtol=1e-2, atol=0.0)


@pytest.mark.parametrize("sparse", [True, False])
def test_entity_memory_optimizer_choice_reaches_the_trainer(tmp_path, tokenizer, assets, sparse):
    """Row-wise AdaGrad takes the entity memory with sparse or dense gradients (dense: the model still compiles);
    either way only the rows of the batch's entities move, and the rest stays with the Trainer's AdamW."""
    from keplm.training.optim import RowwiseAdagrad
    from keplm.training.recipes.kala import KnowledgeArguments

    model = _tagger(tokenizer, assets, sparse_entity_memory=sparse).train()
    # no warm-up of the knowledge modules' own (the default's would start the rate at 0): the rate from step 0
    options = KnowledgeArguments(
        entity_memory_optimizer="rowwise_adagrad", entity_memory_learning_rate=0.05, knowledge_warmup_steps=0
    )
    trainer = _trainer(tmp_path, model, **options.parameter_group_options())
    memory = model.kala.entity_memory.embeddings.weight
    tables = trainer.optimizer.others[0]
    assert isinstance(tables, RowwiseAdagrad)
    assert tables.param_groups[0]["params"] == [memory] and tables.param_groups[0]["lr"] == 0.05
    assert all(p is not memory for g in trainer.optimizer.main.param_groups for p in g["params"])
    assert trainer._sparse_gradients == sparse  # stock gradient clipping unless a gradient is sparse
    batch = KeplmDataCollator.from_processor(KalaProcessor(tokenizer, assets))(
        [KalaProcessor(tokenizer, assets)("john visited paris .")]
    )
    before = memory.detach().clone()
    model(**batch, labels=torch.ones_like(batch["input_ids"])).loss.backward()
    assert memory.grad.is_sparse == sparse
    trainer.optimizer.step()
    moved = (memory.detach() != before).any(dim=1)
    rows = sorted(set(batch["node_entity_ids"].tolist()) - {0})
    assert rows and moved.nonzero().flatten().tolist() == rows
    with pytest.raises(ValueError, match="unknown entity_memory_optimizer"):
        _trainer(tmp_path, model, entity_memory_optimizer="sgd")


def test_knowledge_learning_rate_gets_its_own_param_groups_and_schedule(tmp_path, tokenizer, assets):
    """The model's parameter-group hook drives the Trainer: KALA's knowledge modules get their learning rate (with
    the weight-decay split kept) and the LR schedule; a model that knows no such option rejects it."""
    from transformers import BertForTokenClassification

    from keplm.training.optim import CombinedOptimizer

    for sparse in (False, True):
        config = KalaConfig(
            encoder_config=tiny_encoder_config(tokenizer),
            entity_vocab_size=assets.num_entities,
            num_relations=assets.num_relations,
            num_labels=3,
            sparse_entity_memory=sparse,
        )
        model = KalaForTokenClassification(config)
        trainer = _trainer(tmp_path, model, knowledge_learning_rate=3e-3)
        optimizer = trainer.optimizer
        assert isinstance(optimizer, CombinedOptimizer) == sparse
        lr_of = {
            id(p): (g["lr"], g["weight_decay"] if "weight_decay" in g else None)
            for g in optimizer.param_groups
            for p in g["params"]
        }
        names = dict(model.named_parameters())
        assert len(lr_of) == len(names) == sum(len(g["params"]) for g in optimizer.param_groups)  # each once
        for name, p in names.items():
            knowledge = name.startswith(("kala.entity_memory.", "kala.relation_embeddings.", "kala.knowledge_layers."))
            assert model.is_knowledge_parameter(name) == knowledge
            assert lr_of[id(p)][0] == (3e-3 if knowledge else 1e-4), name
        if not sparse:  # weight decay groups survive the split: LayerNorm/bias stay undecayed
            fc1 = next(n for n in names if n.endswith("modulation.fc1.bias"))[: -len("bias")]
            assert lr_of[id(names[fc1 + "bias"])][1] == 0.0 and lr_of[id(names[fc1 + "weight"])][1] == 0.01
        trainer.lr_scheduler.step()  # the linear schedule scales both learning rates alike
        assert sorted({round(g["lr"], 10) for g in optimizer.param_groups}) == [9e-5, 2.7e-3]
    with pytest.raises(ValueError, match="has no parameter groups"):
        _trainer(tmp_path, BertForTokenClassification(tiny_encoder_config(tokenizer)), knowledge_learning_rate=3e-3)
    with pytest.raises(TypeError, match="unexpected keyword"):
        _trainer(tmp_path, KalaForTokenClassification(config), knowledge_lr=3e-3)


@pytest.mark.parametrize("memory_optimizer", ["adam", "rowwise_adagrad"])
def test_knowledge_modules_warm_up_on_their_own(tmp_path, tokenizer, assets, memory_optimizer):
    """knowledge_warmup_steps: the knowledge groups (the entity memory too, also in its own optimizer) rise linearly
    over their own warm-up while the encoder follows the Trainer's schedule (no warm-up here), and both decay to 0
    at the end; a share < 1 counts training steps; the schedule's state round-trips through the no-pickle
    checkpoint format; a schedule without warm-up is an error, not a silently ignored option."""
    from keplm.training.state import load_state, save_state

    model = _tagger(tokenizer, assets)
    knowledge = {id(p) for name, p in model.named_parameters() if model.is_knowledge_parameter(name)}

    def rates(trainer) -> dict[str, set[float]]:
        found = {}
        for group in trainer.optimizer.param_groups:
            if group["params"]:
                kind = "knowledge" if id(group["params"][0]) in knowledge else "encoder"
                found.setdefault(kind, set()).add(round(group["lr"], 12))
        return found

    def run(trainer, steps):
        seen = []
        for _ in range(steps):
            seen.append(rates(trainer))
            trainer.optimizer.step()  # no gradients: nothing moves; keeps the scheduler's step order
            trainer.lr_scheduler.step()
        return seen

    options = {"knowledge_learning_rate": 1e-2, "entity_memory_optimizer": memory_optimizer}
    trainer = _trainer(tmp_path, model, knowledge_warmup_steps=4, **options)
    seen = run(trainer, 6)
    for step, found in enumerate(seen):
        k = 1e-2 * (step / 4 if step < 4 else (10 - step) / 6)
        assert found == {"knowledge": {round(k, 12)}, "encoder": {round(1e-4 * (10 - step) / 10, 12)}}, step
    save_state(trainer.lr_scheduler.state_dict(), tmp_path, "scheduler")
    resumed = _trainer(tmp_path, model, knowledge_warmup_steps=4, **options)
    resumed.optimizer.load_state_dict(trainer.optimizer.state_dict())  # as a resume restores both
    resumed.lr_scheduler.load_state_dict(load_state(tmp_path, "scheduler"))
    assert run(resumed, 4) == run(trainer, 4)  # steps 6..9 alike after the resume

    again = trainer.create_scheduler(20, trainer.optimizer)  # as a second train() asks: rebuilt for its steps
    assert again is trainer.lr_scheduler is trainer.group_warmup_scheduler
    assert run(trainer, 6)[5] == {"knowledge": {round(1e-2 * 15 / 16, 12)}, "encoder": {round(1e-4 * 15 / 20, 12)}}

    share = _trainer(tmp_path, model, knowledge_warmup_steps=0.25, **options)  # ceil(0.25 * 10) = 3 steps
    assert run(share, 2)[1]["knowledge"] == {round(1e-2 / 3, 12)}
    with pytest.raises(ValueError, match="constant has no warm-up"):
        _trainer(tmp_path, model, lr_scheduler_type="constant", knowledge_warmup_steps=4, **options)


def test_knowledge_warmup_default_follows_the_schedule():
    """--knowledge_warmup_steps unset: half the steps (DEFAULT_KNOWLEDGE_WARMUP) for a knowledge system under a schedule
    with warm-ups, none under one without (constant: the option would be an error) or for a baseline; a value given
    is kept."""
    from keplm.training.recipes.kala import DEFAULT_KNOWLEDGE_WARMUP, KnowledgeArguments

    relational = KnowledgeArguments(system="relational")
    assert DEFAULT_KNOWLEDGE_WARMUP == 0.5
    for schedule in ("linear", "cosine", "polynomial", "constant_with_warmup"):
        assert relational.parameter_group_options(schedule)["knowledge_warmup_steps"] == 0.5, schedule
    for schedule in ("constant", "reduce_lr_on_plateau"):
        assert relational.parameter_group_options(schedule)["knowledge_warmup_steps"] is None, schedule
    assert KnowledgeArguments(system="vanilla").parameter_group_options()["knowledge_warmup_steps"] is None
    given = KnowledgeArguments(system="pointwise", knowledge_warmup_steps=3)
    assert given.parameter_group_options("linear")["knowledge_warmup_steps"] == 3
