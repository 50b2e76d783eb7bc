"""TRELM's mechanisms at more than one setting, against computations written out in the test: the CKA loss of the
model with negatives the test chooses (eq. 2), which and how many FFN neurons knowledge routing trains (3.3), and
the memory bank's λ in each epoch of a Trainer run (eq. 7–8)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import datasets
import numpy as np
import pytest
import torch

from keplm import KeplmTrainer, TrelmProcessor
from keplm.data.collator import KeplmDataCollator
from keplm.data.masking import MaskedLMCollator
from keplm.training.pretraining import MemoryDecayCallback

from .run_args import cpu_training_args
from .test_trelm import ANNOTATION, TEXT, features, make_model

#: two examples with three CKA targets: "new" and "york" (tokens 0 and 1 of the tail Q60), "germany" (token 0)
TEXTS = ["john visited paris in new york .", "berlin is in germany"]
ANNOTATIONS = [
    {
        "entities": [
            {"text": "paris", "start": 13, "end": 18, "id": "Q90"},
            {"text": "new york", "start": 22, "end": 30, "id": "Q60"},
        ],
        "triplets": [{"h": "Q90", "r": "P17", "t": "Q60"}],
    },
    {
        "entities": [
            {"text": "berlin", "start": 0, "end": 6, "id": "Q64"},
            {"text": "germany", "start": 13, "end": 20, "id": "Q183"},
        ],
        "triplets": [{"h": "Q64", "r": "P17", "t": "Q183"}],
    },
]


def _batch(tokenizer, assets, texts=TEXTS, annotations=ANNOTATIONS):
    processor = TrelmProcessor(tokenizer, assets)
    out = features(processor, texts=texts, annotations=annotations)
    rows = [{k: v[i] for k, v in out.items() if k != "special_tokens_mask"} for i in range(len(texts))]
    return KeplmDataCollator.from_processor(processor)(rows)


# ------------------------------------------------------------------------------------------------ eq. 2
@pytest.mark.parametrize(
    "negatives",
    [
        [["usa"], ["york"], ["germany"]],  # K = 1; the last target's only negative is itself: left out, loss 0
        [["usa", "france", "usa", "london"], ["new", "paris", "york", "city"], ["france", "england", "germany", "is"]],
    ],
)
def test_cka_loss_of_the_model_is_eq_2_with_the_chosen_negatives(tokenizer, kge_assets, negatives):
    """The model's CKA loss (eq. 2) for negatives the test chooses, at K = 1 and K = 4: per target token y with
    head-transformed state h (dense, GELU, LayerNorm of the last hidden state), ``−log e^f(h,y) / (e^f(h,y) +
    Σ e^f(h,y'))`` with f(h, y) = h·E_y + b_y (the MLM decoder), a negative equal to its target left out, a repeated
    negative counted each time; the mean over the targets. The sampler is asked for K negatives per target, with
    each target's position within its entity name."""
    k = len(negatives[0])
    model = make_model(tokenizer, kge_assets, use_memory_bank=False, cka_num_negatives=k).eval()
    with torch.no_grad():  # a zero decoder bias and a unit LayerNorm would hide a missing term
        for parameter in (model.lm_head.bias, *model.lm_head.transform.parameters()):
            parameter.add_(0.3 * torch.randn_like(parameter))
    chosen = torch.tensor([tokenizer.convert_tokens_to_ids(row) for row in negatives])
    asked = []

    def sampler(token_index, num_negatives, generator=None):
        asked.append((token_index.tolist(), num_negatives))
        return chosen

    model.negative_sampler.forward = sampler
    seen = {}
    model.trelm.register_forward_hook(lambda module, args, out: seen.update(hidden=out.last_hidden_state))
    batch = _batch(tokenizer, kge_assets)
    with torch.no_grad():
        loss = model(**batch, labels=batch["cka_labels"]).cka_loss
    rows, cols = (batch["cka_labels"] != -100).nonzero(as_tuple=True)  # row-major: the order of `negatives`
    targets = batch["cka_labels"][rows, cols]
    assert tokenizer.convert_ids_to_tokens(targets.tolist()) == ["new", "york", "germany"]
    assert asked == [([0, 1, 0], k)]

    def numpy(tensor):
        return tensor.detach().double().numpy()

    transform = model.lm_head.transform
    x = numpy(seen["hidden"][rows, cols]) @ numpy(transform.dense.weight).T + numpy(transform.dense.bias)
    x = 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    h = (x - mean) / np.sqrt(var + transform.LayerNorm.eps) * numpy(transform.LayerNorm.weight) + numpy(
        transform.LayerNorm.bias
    )
    embeddings, bias = numpy(model.trelm.encoder.embeddings.word_embeddings.weight), numpy(model.lm_head.bias)
    losses = []
    for state, target, row in zip(h, targets.tolist(), chosen.tolist()):

        def f(y, state=state):
            return state @ embeddings[y] + bias[y]

        denominator = np.exp(f(target)) + sum(np.exp(f(y)) for y in row if y != target)
        losses.append(-np.log(np.exp(f(target)) / denominator))
    assert (losses[2] == 0) == (k == 1)
    assert float(loss) == pytest.approx(np.mean(losses), rel=1e-5, abs=1e-6)


# ------------------------------------------------------------------------------------------------ 3.3 routing
@pytest.mark.parametrize("fraction", [0.1, 0.25])
def test_routing_trains_the_most_attributed_share_of_neurons_in_each_layer(tokenizer, kge_assets, fraction):
    """Knowledge routing (3.3, eq. 12) routes, in every layer, the ``round(fraction · I)`` FFN neurons with the
    highest attribution (I = 48 intermediate neurons: 5 at 0.1, where truncation would give 4, and 12 at 0.25), in
    both FFN linear layers (the neuron's row in the first, its column in the second): for attributions the test sets
    per layer, and for the integrated-gradient attributions of a batch (``before_training_step``)."""
    model = make_model(tokenizer, kge_assets, use_memory_bank=False, routing_fraction=fraction).train()
    router = model.enable_knowledge_routing()
    count = int(np.floor(fraction * 48 + 0.5))
    layers = model.trelm.encoder.encoder.layer

    def assert_routed(scores):
        for layer, score in zip(layers, scores):
            want = sorted(np.argsort(-score.numpy(), kind="stable")[:count].tolist())
            first, second = layer.intermediate.dense, layer.output.dense
            assert first.route_index.tolist() == second.route_index.tolist() == want
            assert first.route_weight.shape == (count, 32) and second.route_weight.shape == (count, 32)
            assert score[want].min() > np.delete(score.numpy(), want).max()  # the top ones, not any others

    generator = torch.Generator().manual_seed(int(fraction * 100))
    scores = [torch.randn(48, generator=generator) for _ in layers]
    returned = router.route(scores)
    assert [index.tolist() for index in returned] == [layer.intermediate.dense.route_index.tolist() for layer in layers]
    assert_routed(scores)
    assert layers[0].intermediate.dense.route_index.tolist() != layers[1].intermediate.dense.route_index.tolist()

    batch = _batch(tokenizer, kge_assets)
    batch["labels"] = batch["cka_labels"]
    assert model.before_training_step(batch, SimpleNamespace(global_step=0), None) == {"routing_targets": 3}
    attributed = router.last_scores
    assert all(s.shape == (48,) and s.abs().max() > 0 for s in attributed)
    assert_routed(attributed)


# ------------------------------------------------------------------------------------------------ eq. 7-8
@pytest.mark.parametrize("lam, beta", [(0.5, 2.0), (0.4, 4.0)])
def test_memory_lambda_decays_by_beta_in_each_epoch_of_a_trainer_run(tmp_path, tokenizer, kge_assets, lam, beta):
    """Eq. (8) in a KeplmTrainer run of 3 epochs of 2 steps with ``MemoryDecayCallback``: every training forward of
    epoch q injects with λ_q = λ / β^q, and mixes it as eq. (7) does: at an injected token whose entity the bank
    holds, (1 − λ_q)·(W·kge(e) + b) + λ_q/2·(M_local(e) + M_global(e))."""
    model = make_model(tokenizer, kge_assets, memory_lambda=lam, memory_decay=beta)
    processor = TrelmProcessor(tokenizer, kge_assets)
    out = features(processor, texts=[TEXT] * 4, annotations=[ANNOTATION] * 4)
    dataset = datasets.Dataset.from_dict(out)
    collator = MaskedLMCollator(KeplmDataCollator.from_processor(processor), tokenizer.mask_token_id, len(tokenizer))
    injection, used = model.trelm.injection, []

    def record(module, args, kwargs, output):
        embeddings, entity_ids, inject, memory, memory_mask, value = args
        mixed = inject & memory_mask
        if mixed.any():
            kge = injection.kge[entity_ids[mixed]] @ injection.projection.weight.T + injection.projection.bias
            want = (1 - value) * kge + value / 2 * memory[mixed]
            torch.testing.assert_close(output[mixed], want, atol=1e-5, rtol=1e-5)
        used.append((value, int(mixed.sum())))

    injection.register_forward_hook(record, with_kwargs=True)
    args = cpu_training_args(
        tmp_path,
        num_train_epochs=3,
        per_device_train_batch_size=2,
        learning_rate=1e-3,
        logging_strategy="no",
        remove_unused_columns=False,
        seed=0,
    )
    trainer = KeplmTrainer(
        model=model, args=args, train_dataset=dataset, data_collator=collator, callbacks=[MemoryDecayCallback()]
    )
    trainer.train()
    assert trainer.state.global_step == 6
    assert [value for value, _ in used] == pytest.approx([lam / beta**q for q in (0, 0, 1, 1, 2, 2)], rel=1e-12)
    assert all(mixed > 0 for _, mixed in used[1:])  # from the second step on the bank holds the injected entity
