"""KALA's mechanisms recomputed by hand: KFM in a BERT layer (eq. 1-2), the mention context h_e (footnote 3), QA
stride windows, the direction and relation ids of KG edges, and the entity-memory initialisation (appendix B.1)."""

from __future__ import annotations

import re

import datasets
import pytest
import torch
import torch.nn.functional as F

import keplm.data.collator as collators
from keplm import KalaConfig, KalaForTokenClassification, KalaModel, KalaProcessor
from keplm.modeling.modeling_kala import node_context
from keplm.training.entity_init import initialize_entity_memory_from_encoder

from .conftest import tiny_encoder_config
from .test_kala_model import TEXTS, batch_of, make_model


def _collator(processor):
    return collators.KeplmDataCollator.from_processor(processor)


def _annotation(text, mentions, triplets=()):
    """KALA-format annotation with every whole-word occurrence of each ``(surface, id)`` as a mention."""
    entities = [
        {"text": m.group(), "start": m.start(), "end": m.end(), "id": entity}
        for surface, entity in mentions
        for m in re.finditer(rf"\b{surface}\b", text)
    ]
    return {"entities": entities, "triplets": [{"h": h, "r": r, "t": t} for h, r, t in triplets]}


def _layer_norm(norm, x):
    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def bert_layer_by_hand(layer, x, attention_mask, rows=None, on=None):
    """BertLayer written out, with eq. (1): γ ⊙ LN(·) + β after each LayerNorm, on mention tokens only (``on``, with
    the node-table ``rows`` of each token); without ``rows`` the plain layer (padding masked as keys)."""
    if rows is None:
        rows, on = x.new_zeros(*x.shape[:2], 4, x.shape[-1]), torch.zeros_like(x[..., :1], dtype=torch.bool)
    attention = layer.attention.self
    batch, length, _ = x.shape
    heads, size = attention.num_attention_heads, attention.attention_head_size

    def split(linear):
        return F.linear(x, linear.weight, linear.bias).view(batch, length, heads, size).transpose(1, 2)

    scores = split(attention.query) @ split(attention.key).transpose(-1, -2) / size**0.5
    scores = scores.masked_fill(~attention_mask.bool()[:, None, None, :], float("-inf"))
    context = (scores.softmax(-1) @ split(attention.value)).transpose(1, 2).reshape(batch, length, heads * size)
    gamma1, beta1, gamma2, beta2 = (1 + rows[..., 0, :]), rows[..., 1, :], (1 + rows[..., 2, :]), rows[..., 3, :]
    dense = layer.attention.output.dense
    h = _layer_norm(layer.attention.output.LayerNorm, F.linear(context, dense.weight, dense.bias) + x)
    h = torch.where(on, gamma1 * h + beta1, h)
    up, down = layer.intermediate.dense, layer.output.dense
    y = F.linear(F.gelu(F.linear(h, up.weight, up.bias)), down.weight, down.bias)
    y = _layer_norm(layer.output.LayerNorm, y + h)
    return torch.where(on, gamma2 * y + beta2, y)


@pytest.mark.parametrize("mode", ["pointwise", "relational"])
def test_kfm_last_layer_by_hand(tokenizer, assets, mode):
    """The last BERT layer with KFM equals eq. (1) written out from its input state: γ1/β1 = (1 + h1, h2) scale and
    shift the output of LayerNorm 1, γ2/β2 = (1 + h3, h4) that of LayerNorm 2 (after each norm, not before it), and
    each mention token gathers its node's row of the KFM node table; other tokens are untouched."""
    model = make_model(KalaModel, tokenizer, assets, mode, kfm_layers=[-1])
    layer = model.encoder.encoder.layer[-1]
    with torch.no_grad():  # BERT's zero biases and unit LayerNorms would hide a term missing from the hand version
        for parameter in layer.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    batch = batch_of(KalaProcessor(tokenizer, assets), [*TEXTS, "the big apple is new york"])
    out = model(**batch, output_hidden_states=True)
    (kfm,) = model.knowledge_layers.values()
    table = kfm.modulation(out.entity_representations, out.entity_has_knowledge)  # [nodes, 4, H]: h1..h4
    token_map = batch["entity_token_map"]
    on = (token_map >= 0).unsqueeze(-1)
    assert (table.abs() > 0.05).any() and on.sum() > 3 and len(out.hidden_states) == 3
    rows = table[token_map.clamp(min=0)]  # [B, L, 4, H]
    want = bert_layer_by_hand(layer, out.hidden_states[-2], batch["attention_mask"], rows, on)
    torch.testing.assert_close(out.last_hidden_state, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kfm_layers", [[0, 2], [-3, -2, -1]])
def test_kfm_modulates_both_layernorms_of_every_chosen_layer_and_no_other(tokenizer, assets, kfm_layers):
    """With several KFM layers in a 4-layer encoder, the output of each LayerNorm of every chosen layer (the first
    ones too, not only the last) is γ ⊙ LN(x) + β on mention tokens, with γ = 1 + h1(v) / 1 + h3(v) and β = h2(v) /
    h4(v) of that layer's own MLPs written out from its weights (pointwise: v is the node's entity-memory row, zero
    table for the null entity); tokens outside mentions, and every token of the other layers, read LN(x) alone."""
    torch.manual_seed(0)
    config = KalaConfig(
        encoder_config=tiny_encoder_config(tokenizer, layers=4),
        retrieval_mode="pointwise",
        entity_vocab_size=assets.num_entities,
        num_relations=assets.num_relations,
        kfm_layers=kfm_layers,
        entity_dropout=0.0,
    )
    model = KalaModel(config).eval()
    with torch.no_grad():  # visible values everywhere: zero MLP biases and unit LayerNorms would hide a missing term
        for name, parameter in model.named_parameters():
            if "knowledge_layers" in name or "LayerNorm" in name:
                parameter.normal_(0, 0.3)
        model.entity_memory.embeddings.weight[1:].normal_(0, 1.0)
    model.set_knowledge_assets(assets)
    chosen = {i % 4 for i in kfm_layers}
    seen = {}
    layers = model.encoder.encoder.layer
    for index, layer in enumerate(layers):  # registered after KFM's hooks: they see the modulated output
        for slot, norm in enumerate((layer.attention.output.LayerNorm, layer.output.LayerNorm)):
            norm.register_forward_hook(lambda m, args, out, key=(index, slot): seen.update({key: (args[0], out)}))
    batch = batch_of(KalaProcessor(tokenizer, assets), [*TEXTS, "the big apple is new york"])
    with torch.no_grad():
        model(**batch)
    token_map, nodes = batch["entity_token_map"], batch["node_entity_ids"]
    on = (token_map >= 0).unsqueeze(-1)
    memory = model.entity_memory.embeddings.weight
    vectors, has_knowledge = memory[nodes], (nodes != 0).float()[:, None]  # the null row reads no knowledge
    assert 0 < has_knowledge.sum() < len(nodes) and on.sum() > 3
    checked = 0
    for index, layer in enumerate(layers):
        for slot in (0, 1):
            x, out = seen[(index, slot)]
            norm = (layer.attention.output.LayerNorm, layer.output.LayerNorm)[slot]
            plain = _layer_norm(norm, x)
            if index not in chosen:
                torch.testing.assert_close(out, plain, atol=1e-5, rtol=1e-5)
                continue
            kfm = model.knowledge_layers[str(index)].modulation
            k = kfm.mlp_hidden_size
            hidden = torch.relu(vectors @ kfm.fc1.weight.T + kfm.fc1.bias)  # h1..h4 share the input, not weights
            h = [
                (hidden[:, f * k : (f + 1) * k] @ kfm.fc2_weight[f] + kfm.fc2_bias[f]) * has_knowledge for f in range(4)
            ]
            gamma, beta = 1 + h[2 * slot][token_map.clamp(min=0)], h[2 * slot + 1][token_map.clamp(min=0)]
            want = torch.where(on, gamma * plain + beta, plain)
            assert (want - plain).abs().max() > 0.1  # the modulation is visible at this layer
            torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
            checked += 1
    assert checked == 2 * len(chosen)


def test_node_context_is_the_mean_over_all_tokens_of_all_mentions():
    """h_e (footnote 3) per node: the mean state of all tokens of all its mentions, across batch rows; a node
    mentioned twice averages over tokens (not over mention means); nodes without tokens get zero; -1 is ignored."""
    torch.manual_seed(0)
    hidden = torch.randn(2, 5, 3)
    token_map = torch.tensor([[-1, 0, 0, -1, 2], [2, 2, -1, 0, -1]])  # node 0: 2 + 1 tokens, node 2: 1 + 2 tokens
    got = node_context(hidden, token_map, num_nodes=4)
    want = torch.stack(
        [
            (hidden[0, 1] + hidden[0, 2] + hidden[1, 3]) / 3,
            torch.zeros(3),
            (hidden[0, 4] + hidden[1, 0] + hidden[1, 1]) / 3,
            torch.zeros(3),
        ]
    )
    torch.testing.assert_close(got, want)


QA_CONTEXT = (
    "john visited new york and the big apple . mary lives in paris , the capital of france . "
    "the river seine flows through paris . berlin is a city in germany and london is in england ."
)
QA_MENTIONS = [
    ("new york", "Q60"),
    ("big apple", "Q60"),
    ("paris", "Q90"),
    ("france", "Q142"),
    ("river seine", "Q1471"),
    ("berlin", "Q64"),
    ("city", "Q515"),
    ("germany", "Q183"),
    ("london", "Q84"),
    ("england", "Q21"),
]
QA_FACTS = [("Q60", "P17", "Q30"), ("Q90", "P17", "Q142"), ("Q64", "P31", "Q515"), ("Q84", "P17", "Q21")]


def test_qa_stride_windows_map_each_mention_to_its_tokens(tokenizer, assets):
    """Every stride window maps each context mention inside it to exactly its tokens, all on one node holding the
    mention's entity row (the same node for repeated entities), drops mentions outside it, keeps the question's
    mentions, and has as nodes the mentioned entities plus their fact neighbours. A mention cut by the window
    boundary keeps its in-window tokens: they are mapped to its node (today's behaviour)."""
    question = "what river flows through paris ?"
    context, asked = _annotation(QA_CONTEXT, QA_MENTIONS, QA_FACTS), _annotation(question, [("paris", "Q90")])
    examples = {
        "id": ["0"],
        "question": [question],
        "context": [QA_CONTEXT],
        "knowledge": [context],
        "question_knowledge": [asked],
    }
    features = KalaProcessor(tokenizer, assets).prepare_qa_features(
        examples, max_length=23, doc_stride=7, training=False
    )
    encoding = tokenizer(
        [question],
        [QA_CONTEXT],
        truncation="only_second",
        max_length=23,
        stride=7,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )
    assert len(features["input_ids"]) == len(encoding["input_ids"]) == 5
    cut = 0
    for window, offsets in enumerate(encoding["offset_mapping"]):
        sequence_ids, ids = encoding.sequence_ids(window), features["input_ids"][window]
        token_map, nodes = features["entity_token_map"][window], features["node_entity_ids"][window]
        expected, node_of = [-1] * len(ids), {}
        for part, annotation in ((1, context), (0, asked)):
            positions = [i for i, s in enumerate(sequence_ids) if s == part]
            low, high = offsets[positions[0]][0], offsets[positions[-1]][1]
            for mention in annotation["entities"]:
                tokens = [i for i in positions if offsets[i][0] < mention["end"] and offsets[i][1] > mention["start"]]
                if not tokens:
                    continue
                if low <= mention["start"] and mention["end"] <= high:  # inside: exactly the mention's tokens
                    assert tokenizer.convert_ids_to_tokens([ids[i] for i in tokens]) == tokenizer.tokenize(
                        mention["text"]
                    )
                else:
                    cut += 1
                node = node_of.setdefault(mention["id"], token_map[tokens[0]])
                assert node >= 0 and nodes[node] == assets.entity_row(mention["id"])
                for i in tokens:
                    expected[i] = node
        assert token_map == expected, window
        neighbours = {h if t in node_of else t for h, _, t in QA_FACTS if h in node_of or t in node_of}
        assert sorted(nodes) == sorted(assets.entity_row(e) for e in node_of.keys() | neighbours)
    assert cut == 3  # "big apple" and "river seine" cut at a window's start, "river seine" at one's end


@pytest.mark.parametrize("inverse", [True, False])
def test_edges_run_tail_to_head_with_relation_id_and_inverse_the_other_way(tokenizer, assets, inverse):
    """A fact (h, r, t) becomes the edge t → h (edge_index row 0 = source, as torch-geometric's default
    source_to_target flow reads it) with relation id r, plus h → t with r + N when use_inverse_relations; a relation
    outside the vocabulary is [UNK] = 1 (inverse 1 + N). Facts touching no mention are dropped. The model agrees:
    an unseen head hears its tail, an unseen tail does not hear its head without the inverse edge."""
    n = assets.num_relations
    processor = KalaProcessor(tokenizer, assets, use_inverse_relations=inverse)
    facts = [("Q90", "P17", "Q142"), ("Q90", "P999", "Q515"), ("Q64", "P17", "Q183")]
    features = processor(
        "paris is in france",
        annotation=_annotation("paris is in france", [("paris", "Q90"), ("france", "Q142")], facts),
    )
    entity = [assets.entity_vocab[row] for row in features["node_entity_ids"]]
    (sources, targets), relations = features["edge_index"], features["edge_relation_ids"]
    got = sorted((entity[s], entity[t], r) for s, t, r in zip(sources, targets, relations))
    want = [("Q142", "Q90", 2), ("Q515", "Q90", 1)] + [("Q90", "Q142", 2 + n), ("Q90", "Q515", 1 + n)] * inverse
    assert assets.relation_vocab[1:3] == ["[UNK]", "P17"] and got == sorted(want)

    model = make_model(KalaModel, tokenizer, assets, use_inverse_relations=inverse)
    text, mentions = "unknownia is in france", [("unknownia", "Q999"), ("france", "Q142")]
    for fact, hears in (("Q999", "P17", "Q142"), True), (("Q142", "P17", "Q999"), inverse):
        features = processor(text, annotation=_annotation(text, mentions, [fact]))
        unseen = features["node_entity_ids"].index(0)
        assert model(**_collator(processor)([features])).entity_has_knowledge[unseen] == hears, fact


def test_entity_memory_starts_at_mean_mention_state_and_null_row_stays_zero(tokenizer, assets):
    """Entity-memory initialisation writes each mentioned entity's row as the mean of the plain encoder's last-layer
    states over all tokens of all its training mentions (not their sum, nor first tokens only), whatever knowledge
    state an earlier forward left behind; the null row 0 stays exactly zero, there and through AdamW training with
    weight decay on a batch where it would get a gradient if it could."""
    processor = KalaProcessor(tokenizer, assets)
    texts = [
        "john visited new york .",
        "new york is a city in usa",
        "mary lives in the big apple .",
        "unknownia is in france",
    ]
    features = [processor(text) for text in texts]
    model = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3)
    collator = _collator(processor)
    model(**collator(features))  # leaves its knowledge state in the KFM hooks: the initialisation must not use it
    written = initialize_entity_memory_from_encoder(
        model, datasets.Dataset.from_list(features), collator, batch_size=3, disable_tqdm=True
    )
    assert written == 3  # Q60, Q515 ("city"), Q142 ("france"); unseen "unknownia" is the null row
    states = []  # last-layer states of every token of every "new york" / "big apple" (Q60) mention
    for feature in features:
        with torch.no_grad():
            hidden = model.base_model.encoder(input_ids=torch.tensor([feature["input_ids"]])).last_hidden_state[0]
        row_of_token = [feature["node_entity_ids"][n] if n >= 0 else -1 for n in feature["entity_token_map"]]
        states += [hidden[i] for i, row in enumerate(row_of_token) if row == assets.entity_row("Q60")]
    states = torch.stack(states)
    memory = model.base_model.entity_memory.embeddings.weight
    assert len(states) == 6  # three two-token mentions
    torch.testing.assert_close(memory[assets.entity_row("Q60")], states.mean(0), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(states.mean(0), states[::2].mean(0), atol=1e-3)  # first tokens only: another row
    assert torch.equal(memory[0], torch.zeros_like(memory[0]))

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    # the unseen "unknownia" (null row) with two informative neighbours: its row then enters the attention scores of
    # eq. (3), the path by which row 0 would get a gradient (with one neighbour the softmax is constant)
    text, facts = "unknownia is a city in france", [("Q999", "P17", "Q142"), ("Q999", "P31", "Q515")]
    unseen = processor(
        text, annotation=_annotation(text, [("unknownia", "Q999"), ("city", "Q515"), ("france", "Q142")], facts)
    )
    batch = collator([features[0], unseen])
    france = memory[assets.entity_row("Q142")].detach().clone()
    for _ in range(3):
        loss = model(**batch, labels=torch.randint(0, 3, batch["input_ids"].shape)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert not torch.equal(memory[assets.entity_row("Q142")], france)
    assert torch.equal(memory[0], torch.zeros_like(memory[0]))
