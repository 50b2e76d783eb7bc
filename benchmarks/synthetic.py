"""Benchmark presets and synthetic KALA QA features (the lists ``KalaProcessor.prepare_qa_features`` emits).

Statistics of the paper's QA setting (KALA, Kang et al. 2022): per 384-token context about 57 graph nodes,
0.64 KG edges per node and 93 entity-mention spans (several mentions per node allowed). Everything is
drawn from a seeded ``numpy`` generator, so every benchmark process sees exactly the same features.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

CLS_ID, SEP_ID, FIRST_WORD_ID = 101, 102, 1000


@dataclass(frozen=True)
class EncoderShape:
    """The BERT shape of a benchmark preset (every benchmark's presets extend it)."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int

    def encoder(self) -> str:
        """The encoder's shape as the reports write it (the start of a preset's ``describe()``)."""
        return (
            f"BERT {self.num_layers} layers, hidden {self.hidden_size}, {self.num_heads} heads, FFN "
            f"{self.intermediate_size}"
        )

    def bert_config(self, vocab_size: int, positions: int = 512):
        from transformers import BertConfig

        return BertConfig(
            vocab_size=vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            intermediate_size=self.intermediate_size,
            max_position_embeddings=positions,
        )


@dataclass(frozen=True)
class Preset(EncoderShape):
    vocab_size: int
    batch_size: int
    seq_len: int
    entity_vocab_size: int
    num_relations: int  # relation vocabulary incl. the reserved self-loop (0) and unknown (1) ids
    nodes_per_context: float  # at full sequence length; scaled down for shorter features
    edges_per_node: float  # directed edges, both directions of each fact (as KalaProcessor emits them)
    mentions_per_context: float  # mention spans at full sequence length
    question_len: int = 16
    unseen_fraction: float = 0.2  # nodes whose entity is unseen in training -> null row 0
    full_length_fraction: float = 0.85  # QA stride windows are mostly full; the rest are last windows
    graph_pad_multiple: int = 64  # collator graph_pad_to_multiple_of used with --compile
    reference_len: int = 384  # the per-context statistics above are for contexts of this many tokens

    def encoder_config(self):
        return self.bert_config(self.vocab_size, max(512, self.seq_len))

    def describe(self) -> str:
        return (
            f"{self.encoder()}, vocab {self.vocab_size}; batch {self.batch_size} × seq {self.seq_len}; entity "
            f"memory {self.entity_vocab_size} × {self.hidden_size}; {self.num_relations} relations (+ inverses); "
            "KFM on the last layer"
        )

    def as_dict(self) -> dict:
        return asdict(self)


PRESETS = {
    # BERT-base (BertConfig() defaults) at the paper's QA setting.
    "paper": Preset(
        name="paper",
        hidden_size=768,
        num_layers=12,
        num_heads=12,
        intermediate_size=3072,
        vocab_size=30522,
        batch_size=12,
        seq_len=384,
        entity_vocab_size=62_800,
        num_relations=400,
        nodes_per_context=57,
        edges_per_node=0.64,
        mentions_per_context=93,
        graph_pad_multiple=64,
    ),
    # Shrunk shape that runs in minutes on a small CPU; the entity memory keeps its 62.8k rows.
    "cpu-small": Preset(
        name="cpu-small",
        hidden_size=256,
        num_layers=4,
        num_heads=4,
        intermediate_size=1024,
        vocab_size=30522,
        batch_size=4,
        seq_len=128,
        entity_vocab_size=62_800,
        num_relations=400,
        nodes_per_context=57,
        edges_per_node=0.64,
        mentions_per_context=93,
        graph_pad_multiple=16,
    ),
}


def _spans(rng: np.random.Generator, first: int, stop: int, count: int) -> list[tuple[int, int]]:
    """``count`` non-overlapping spans of 1-3 tokens (mean ~1.5) inside ``[first, stop)``."""
    room = stop - first
    lengths = rng.choice([1, 2, 3], size=count, p=[0.6, 0.3, 0.1])
    while lengths.sum() > room and count:
        count -= 1
        lengths = lengths[:count]
    gaps = rng.multinomial(room - int(lengths.sum()), np.full(count + 1, 1.0 / (count + 1)))
    spans, position = [], first
    for length, gap in zip(lengths, gaps[:-1]):
        position += int(gap)
        spans.append((position, position + int(length) - 1))
        position += int(length)
    return spans


def make_feature(rng: np.random.Generator, preset: Preset) -> dict:
    """One QA feature: ``[CLS] question [SEP] context [SEP]`` with its context knowledge graph."""
    full = preset.seq_len
    length = full if rng.random() < preset.full_length_fraction else int(rng.integers(full // 2, full))
    q = preset.question_len
    input_ids = rng.integers(FIRST_WORD_ID, preset.vocab_size, size=length)
    input_ids[0], input_ids[q + 1], input_ids[length - 1] = CLS_ID, SEP_ID, SEP_ID
    token_type_ids = np.zeros(length, dtype=np.int64)
    token_type_ids[q + 2 :] = 1
    mean_fraction = preset.full_length_fraction + (1 - preset.full_length_fraction) * 0.75
    scale = length / (preset.reference_len * mean_fraction)  # so the *mean* matches the paper's statistics
    # graph: facts both directions; every non-mentioned node is a neighbour reached by one fact
    num_nodes = max(2, round(rng.uniform(0.5, 1.5) * preset.nodes_per_context * scale))
    num_facts = max(1, round(preset.edges_per_node * num_nodes / 2))
    neighbours = min(round(0.3 * num_nodes), num_facts)
    mentioned = num_nodes - neighbours
    nodes = rng.integers(1, preset.entity_vocab_size, size=num_nodes)
    nodes[rng.random(num_nodes) < preset.unseen_fraction] = 0
    heads = rng.integers(0, mentioned, size=num_facts)
    tails = rng.integers(0, num_nodes - 1, size=num_facts)
    tails = np.where(tails >= heads, tails + 1, tails)  # no self facts
    tails[:neighbours] = np.arange(mentioned, num_nodes)
    relations = rng.integers(2, preset.num_relations, size=num_facts)
    sources = np.concatenate([tails, heads])
    targets = np.concatenate([heads, tails])
    edge_relations = np.concatenate([relations, relations + preset.num_relations])  # inverse relation ids
    # mentions: each mentioned node at least once, the rest at random; spans inside question and context
    num_mentions = max(mentioned, round(preset.mentions_per_context * scale * rng.uniform(0.8, 1.2)))
    in_question = round(num_mentions * q / length)
    spans = _spans(rng, 1, q + 1, in_question) + _spans(rng, q + 2, length - 1, num_mentions - in_question)
    owners = np.concatenate([np.arange(mentioned), rng.integers(0, mentioned, size=max(0, len(spans) - mentioned))])
    rng.shuffle(owners)
    token_map = np.full(length, -1, dtype=np.int64)
    for (first, last), node in zip(spans, owners[: len(spans)]):
        token_map[first : last + 1] = node
    start = int(rng.integers(q + 2, max(q + 3, length - 6)))
    return {
        "input_ids": input_ids.tolist(),
        "attention_mask": [1] * length,
        "token_type_ids": token_type_ids.tolist(),
        "entity_token_map": token_map.tolist(),
        "node_entity_ids": nodes.tolist(),
        "edge_index": [sources.tolist(), targets.tolist()],
        "edge_relation_ids": edge_relations.tolist(),
        "start_positions": start,
        "end_positions": start + int(rng.integers(0, 5)),
    }


def make_features(preset: Preset, count: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [make_feature(rng, preset) for _ in range(count)]


def feature_stats(features: list[dict]) -> dict:
    """Mean per-feature graph statistics, to check the generator against the paper's numbers."""

    def spans(token_map):
        return sum(1 for i, v in enumerate(token_map) if v >= 0 and (i == 0 or token_map[i - 1] != v))

    nodes = np.array([len(f["node_entity_ids"]) for f in features])
    edges = np.array([len(f["edge_relation_ids"]) for f in features])
    return {
        "tokens": float(np.mean([len(f["input_ids"]) for f in features])),
        "nodes": float(nodes.mean()),
        "edges_per_node": float(edges.sum() / nodes.sum()),
        "mention_spans": float(np.mean([spans(f["entity_token_map"]) for f in features])),
        "mention_tokens": float(np.mean([sum(v >= 0 for v in f["entity_token_map"]) for f in features])),
        "unseen_node_fraction": float(np.mean([v == 0 for f in features for v in f["node_entity_ids"]])),
    }
