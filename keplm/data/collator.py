"""Batching: pad every sequence family of the features and merge per-example graphs into one graph."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from numbers import Number

import numpy as np
import torch
from torch_geometric.data import Batch, Data

from keplm.tokenization.schema import GraphSchema

#: token-level keys padded when nothing else is declared (a plain text model)
DEFAULT_SEQUENCE_FAMILIES = {
    "input_ids": ("input_ids", "attention_mask", "token_type_ids", "special_tokens_mask", "labels"),
}
DEFAULT_POSITION_KEYS = {"start_positions": "input_ids", "end_positions": "input_ids"}


#: the graph keys of KALA-style features when a processor declares nothing else
DEFAULT_GRAPH_SCHEMA = GraphSchema()
GRAPH_KEYS = DEFAULT_GRAPH_SCHEMA.keys


#: encoders that number positions from the non-padding tokens themselves (padding_idx + 1 onwards): left padding
#: leaves their positions alone, and an explicit 0-based position_ids would be wrong for them
_POSITIONS_FROM_TOKENS = ("roberta", "xlm-roberta", "camembert", "data2vec-text", "longformer", "xmod")


def _absolute_positions(model) -> bool:
    """Whether an encoder of ``model`` embeds absolute positions numbered from the first slot (BERT, ELECTRA, ...),
    so that left padding would shift them."""
    config = model.config
    encoders = config.encoder_configs().values() if hasattr(config, "encoder_configs") else [config]
    return any(
        getattr(c, "position_embedding_type", "absolute") == "absolute"
        and getattr(c, "max_position_embeddings", None) is not None
        and getattr(c, "model_type", None) not in _POSITIONS_FROM_TOKENS
        for c in encoders
    )


def pad_value(key: str, pad_token_id: int) -> int:
    """Padding of a token-level key by its name: token ids get the pad token, labels -100, token → node maps and
    token → knowledge-unit maps -1, special-token masks 1, attention masks and token types 0."""
    if key.endswith("input_ids"):
        return pad_token_id
    if key.endswith("labels"):
        return -100
    if key.endswith(("token_map", "unit_ids")):
        return -1
    if key.endswith("special_tokens_mask"):
        return 1
    return 0


@dataclass
class KeplmDataCollator:
    """Collate processor features into model inputs.

    * Every sequence family (``sequence_families``: the key of a family's token ids → its token-level keys, e.g.
      ``input_ids`` with ``attention_mask``, ``labels``, ``entity_token_map``, and Roof-Transformer's
      ``knowledge_input_ids`` with ``knowledge_attention_mask``) is padded to its longest member (rounded up to
      ``pad_to_multiple_of``) on ``padding_side``. Scalar token positions (``position_keys``, e.g. QA
      ``start_positions``) move with left padding; other scalars become tensors.
    * ``graph=True`` (models that read a graph): the keys of ``graph_schema`` (the processor's declaration,
      :class:`GraphSchema`) hold each example's graph, which becomes a torch-geometric ``Data`` and the batch a
      ``Batch`` (node indices offset per example); the token → node maps are offset the same way, the per-edge
      values are optional; ``graph_pad_to_multiple_of`` pads nodes and edges with inert null nodes so compiled
      models see few shapes; ``entity_vocab_size`` (the number of entity-memory rows) rejects unknown node values.
    * A feature key that is neither declared nor a scalar is a ValueError: nothing is dropped silently.

    Build it with :meth:`from_processor`. Works in ``DataLoader`` worker processes (plain picklable dataclass).
    """

    pad_token_id: int = 0
    padding_side: str = "right"
    pad_to_multiple_of: int | None = None
    sequence_families: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_SEQUENCE_FAMILIES))
    position_keys: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_POSITION_KEYS))
    graph: bool = False
    graph_schema: GraphSchema = DEFAULT_GRAPH_SCHEMA
    graph_pad_to_multiple_of: int | None = None
    entity_vocab_size: int | None = None
    #: with left padding, add ``position_ids`` counting from each row's first token, so absolute position embeddings
    #: see a sentence as it is alone (set by :meth:`from_processor` for models that take them)
    position_ids: bool = False

    def __post_init__(self):
        if self.padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {self.padding_side!r}")
        if not isinstance(self.graph_schema, GraphSchema):
            raise ValueError(f"graph_schema must be a GraphSchema, got {type(self.graph_schema).__name__}")
        self._family_of = {key: family for family, keys in self.sequence_families.items() for key in keys}

    @classmethod
    def from_processor(cls, processor, model=None, **kwargs) -> KeplmDataCollator:
        """The collator of a keplm processor's features (its tokenizer's pad token and padding side, its
        sequence families, position keys and graph schema); ``graph`` follows what ``model`` reads
        (``config.reads_graph``), or without a model whether the processor makes graphs."""
        tokenizer = processor.tokenizer
        defaults = {
            "pad_token_id": tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0,
            "padding_side": tokenizer.padding_side,
            "sequence_families": dict(processor.sequence_families),
            "position_keys": dict(processor.position_keys),
        }
        schema = getattr(processor, "graph_schema", None)
        if schema is not None:
            defaults["graph_schema"] = schema
        defaults["graph"] = schema is not None
        if model is not None:
            config = model.config
            if getattr(config, "is_encoder_decoder", False):
                # an encoder-decoder's labels are the target sequence, a family of their own (padded with -100)
                families = {
                    family: tuple(k for k in keys if k != "labels")
                    for family, keys in defaults["sequence_families"].items()
                }
                defaults["sequence_families"] = {**families, "labels": ("labels",)}
            defaults["graph"] = bool(getattr(config, "reads_graph", False))
            if defaults["graph"] and getattr(config, "uses_knowledge_assets", False):
                defaults["entity_vocab_size"] = config.entity_vocab_size
            if kwargs.get("padding_side", defaults["padding_side"]) == "left" and _absolute_positions(model):
                if "position_ids" not in inspect.signature(model.forward).parameters:
                    raise ValueError(
                        f"{type(model).__name__} reads absolute positions but takes no position_ids: "
                        "left padding would shift every padded sentence; pad on the right "
                        "(tokenizer.padding_side = 'right')"
                    )
                defaults["position_ids"] = True
        return cls(**(defaults | kwargs))

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        if not features:
            raise ValueError("cannot collate an empty list of features")
        keys = list(features[0])
        schema_keys = self.graph_schema.keys
        graph_keys = [k for k in keys if k in schema_keys]
        if graph_keys and not self.graph:
            raise ValueError(
                f"the features carry graph fields {graph_keys} but this collator was built for a model "
                "that reads no graph (graph=False)"
            )
        if self.graph and self.graph_schema.nodes not in keys:
            raise ValueError(
                f"the model reads a graph but the features have no {self.graph_schema.nodes} (build them "
                "with the model's processor)"
            )
        scalars = {k for k in keys if isinstance(features[0][k], (Number, np.number))}
        unknown = [k for k in keys if k not in self._family_of and k not in schema_keys and k not in scalars]
        if unknown:
            raise ValueError(
                f"feature fields {unknown} are neither token-level fields of a declared sequence family "
                f"({sorted(self._family_of)}) nor scalars: declare them or remove them before batching"
            )
        batch: dict[str, torch.Tensor] = {}
        shifts = {}
        for family in self.sequence_families:
            family_keys = [k for k in keys if self._family_of.get(k) == family and k not in scalars]
            if family in keys:
                shifts[family] = self._pad_family(features, family, family_keys, batch)
            elif family_keys:
                raise ValueError(f"features have fields of the {family!r} family but no {family!r}")
        for key in keys:
            if key in batch or key in schema_keys:
                continue
            values = torch.tensor([f[key] for f in features])
            family = self.position_keys.get(key)
            if family in shifts:
                values = torch.where(values >= 0, values + shifts[family], values)
            batch[key] = values
        if self.graph:
            self._collate_graphs(features, batch)
        if self.position_ids and self.padding_side == "left" and "attention_mask" in batch:
            batch["position_ids"] = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        return batch

    def _pad_family(self, features: list[dict], family: str, family_keys: list[str], batch: dict) -> torch.Tensor:
        """Pad one family's keys into ``batch``; return each row's left-padding shift."""
        lengths = [len(f[family]) for f in features]
        length = max(lengths)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        shift = torch.tensor([length - n if self.padding_side == "left" else 0 for n in lengths])
        for key in family_keys:
            pad = -1 if key in self.graph_schema.node_maps else pad_value(key, self.pad_token_id)  # off-node
            array = np.full((len(features), length), pad, dtype=np.int64)
            for row, feature in enumerate(features):
                values = feature[key]
                if len(values) != lengths[row]:
                    raise ValueError(f"feature {row}: {key} has {len(values)} entries for {lengths[row]} {family}")
                start = int(shift[row])
                array[row, start : start + len(values)] = values
            batch[key] = torch.from_numpy(array)
        return shift

    def _collate_graphs(self, features: list[dict], batch: dict) -> None:
        schema = self.graph_schema
        values_keys = [key for key in schema.edge_values if key in features[0]]
        maps = [key for key in schema.node_maps if key in batch]
        graphs = []
        for row, feature in enumerate(features):
            nodes = torch.as_tensor(feature[schema.nodes], dtype=torch.long).reshape(-1)
            edges = torch.as_tensor(feature[schema.edges], dtype=torch.long).reshape(2, -1)
            num_nodes = nodes.shape[0]
            data = {"x": nodes, "edge_index": edges}
            for key in values_keys:
                values = torch.as_tensor(feature[key], dtype=torch.long).reshape(-1)
                if values.shape[0] != edges.shape[1]:
                    raise ValueError(f"feature {row}: {edges.shape[1]} edges but {values.shape[0]} {key}")
                data[key] = values
            if edges.numel() and (int(edges.min()) < 0 or int(edges.max()) >= num_nodes):
                raise ValueError(f"feature {row}: {schema.edges} refers to nodes outside its {num_nodes} nodes")
            for key in maps:
                token_map = np.asarray(feature.get(key, []))
                if token_map.size and (token_map.min() < -1 or token_map.max() >= num_nodes):
                    raise ValueError(f"feature {row}: {key} refers to nodes outside its {num_nodes} nodes")
            if (
                self.entity_vocab_size is not None
                and nodes.numel()
                and (int(nodes.min()) < 0 or int(nodes.max()) >= self.entity_vocab_size)
            ):
                raise ValueError(
                    f"feature {row}: unknown entity id {int(nodes.max())} (the entity memory has "
                    f"{self.entity_vocab_size} rows; unseen entities must be mapped to the null entity 0)"
                )
            graphs.append(data)
        if len(graphs) == 1:  # one graph needs no offsets: skip Batch's per-call cost (~1 ms, most of a bs-1 collation)
            graph = graphs[0]
        else:
            graph = Batch.from_data_list([Data(**data, num_nodes=data["x"].shape[0]) for data in graphs])
            offsets = graph.ptr[:-1].unsqueeze(1)
            for key in maps:
                batch[key] = torch.where(batch[key] >= 0, batch[key] + offsets, batch[key])
        nodes, edges = graph["x"], graph["edge_index"]
        values = {key: graph[key] for key in values_keys}
        if self.graph_pad_to_multiple_of:
            nodes, edges, values = _pad_graph(nodes, edges, values, self.graph_pad_to_multiple_of)
        batch[schema.nodes] = nodes
        batch[schema.edges] = edges
        batch.update(values)


def _pad_graph(nodes, edges, edge_values: dict, multiple):
    """Append null nodes (no mentions) and self-edges on the first of them: they never change any output (their
    per-edge values are 0, labels -100: :func:`pad_value`)."""
    num_nodes = -(-(nodes.shape[0] + 1) // multiple) * multiple
    num_edges = -(-max(edges.shape[1], 1) // multiple) * multiple
    pad_node = nodes.shape[0]
    nodes = torch.cat([nodes, nodes.new_zeros(num_nodes - nodes.shape[0])])
    extra = num_edges - edges.shape[1]
    edges = torch.cat([edges, edges.new_full((2, extra), pad_node)], dim=1)
    edge_values = {
        key: torch.cat([values, values.new_full((extra,), pad_value(key, 0))]) for key, values in edge_values.items()
    }
    return nodes, edges, edge_values


__all__ = ["DEFAULT_GRAPH_SCHEMA", "GRAPH_KEYS", "GraphSchema", "KeplmDataCollator", "pad_value"]
