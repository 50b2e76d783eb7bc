"""Batching: pad text fields and merge per-example knowledge graphs into one disjoint-union graph."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.data import Batch, Data

GRAPH_COLUMNS = ("entity_token_map", "node_entity_ids", "edge_index", "edge_relation_ids")
_PAD_VALUES = {"attention_mask": 0, "token_type_ids": 0, "labels": -100, "entity_token_map": -1, "special_tokens_mask": 1}


@dataclass
class KnowledgeGraphCollator:
    """Collate processor features into model inputs.

    Token-level lists are right-padded (``input_ids`` with ``pad_token_id``, ``labels`` with -100,
    ``entity_token_map`` with -1); each example's graph becomes a torch-geometric ``Data`` and the batch a
    ``Batch`` (node indices offset per example), and ``entity_token_map`` is offset the same way so that it
    indexes the batched nodes. Scalar fields (``start_positions``) become tensors; other fields (e.g.
    ``example_id``, ``offset_mapping``) are dropped, as the Trainer does with unused columns.
    ``graph_pad_to_multiple_of`` pads nodes/edges with inert null nodes so compiled models see few shapes.
    An optional per-edge ``edge_labels`` (e.g. relation-extraction targets) is concatenated in edge order and
    padded with -100.
    Works in ``DataLoader`` worker processes (plain picklable dataclass).
    """

    pad_token_id: int = 0
    pad_to_multiple_of: int | None = None
    graph_pad_to_multiple_of: int | None = None
    max_entity_id: int | None = None  # entity-memory size, to reject unknown ids at batching time

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        if not features:
            raise ValueError("cannot collate an empty list of features")
        batch: dict[str, torch.Tensor] = {}
        sequence_keys = [k for k in ("input_ids", "attention_mask", "token_type_ids", "labels", "entity_token_map")
                         if k in features[0]]
        length = max(len(f["input_ids"]) for f in features)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        for key in sequence_keys:
            pad = self.pad_token_id if key == "input_ids" else _PAD_VALUES.get(key, 0)
            array = np.full((len(features), length), pad, dtype=np.int64)
            for row, feature in enumerate(features):
                values = feature[key]
                if len(values) != len(feature["input_ids"]):
                    raise ValueError(f"feature {row}: {key} has {len(values)} entries for {len(feature['input_ids'])} tokens")
                array[row, : len(values)] = values
            batch[key] = torch.from_numpy(array)
        for key in ("start_positions", "end_positions"):
            if key in features[0]:
                batch[key] = torch.tensor([f[key] for f in features], dtype=torch.long)
        if "node_entity_ids" in features[0]:
            self._collate_graphs(features, batch)
        return batch

    def _collate_graphs(self, features: list[dict], batch: dict) -> None:
        graphs, edge_labels = [], []
        for row, feature in enumerate(features):
            nodes = torch.as_tensor(feature["node_entity_ids"], dtype=torch.long).reshape(-1)
            edges = torch.as_tensor(feature["edge_index"], dtype=torch.long).reshape(2, -1)
            relations = torch.as_tensor(feature["edge_relation_ids"], dtype=torch.long).reshape(-1)
            num_nodes = nodes.shape[0]
            if relations.shape[0] != edges.shape[1]:
                raise ValueError(f"feature {row}: {edges.shape[1]} edges but {relations.shape[0]} edge relation ids")
            if edges.numel() and (int(edges.min()) < 0 or int(edges.max()) >= num_nodes):
                raise ValueError(f"feature {row}: edge_index refers to nodes outside its {num_nodes} nodes")
            token_map = np.asarray(feature["entity_token_map"])
            if token_map.size and (token_map.min() < -1 or token_map.max() >= num_nodes):
                raise ValueError(f"feature {row}: entity_token_map refers to nodes outside its {num_nodes} nodes")
            if self.max_entity_id is not None and nodes.numel() and (
                int(nodes.min()) < 0 or int(nodes.max()) >= self.max_entity_id
            ):
                raise ValueError(
                    f"feature {row}: unknown entity id {int(nodes.max())} (entity memory has {self.max_entity_id} rows;"
                    " unseen entities must be mapped to the null entity 0)"
                )
            if "edge_labels" in features[0]:
                edge_labels.append(torch.as_tensor(feature["edge_labels"], dtype=torch.long).reshape(-1))
                if edge_labels[-1].shape[0] != edges.shape[1]:
                    raise ValueError(f"feature {row}: {edges.shape[1]} edges but {edge_labels[-1].shape[0]} edge labels")
            graphs.append(Data(x=nodes, edge_index=edges, edge_attr=relations, num_nodes=num_nodes))
        graph = Batch.from_data_list(graphs)
        node_entity_ids, edge_index, edge_relation_ids = graph.x, graph.edge_index, graph.edge_attr
        token_map = batch["entity_token_map"]
        offsets = graph.ptr[:-1].unsqueeze(1)
        batch["entity_token_map"] = torch.where(token_map >= 0, token_map + offsets, token_map)
        labels = torch.cat(edge_labels) if edge_labels else None
        if self.graph_pad_to_multiple_of:
            node_entity_ids, edge_index, edge_relation_ids, labels = _pad_graph(
                node_entity_ids, edge_index, edge_relation_ids, self.graph_pad_to_multiple_of, labels
            )
        batch["node_entity_ids"] = node_entity_ids
        batch["edge_index"] = edge_index
        batch["edge_relation_ids"] = edge_relation_ids
        if labels is not None:
            batch["edge_labels"] = labels


def _pad_graph(nodes, edges, relations, multiple, edge_labels=None):
    """Append null nodes (no mentions) and self-edges on the first of them: they never change any output
    (their ``edge_labels``, if any, are -100)."""
    num_nodes = -(-(nodes.shape[0] + 1) // multiple) * multiple
    num_edges = -(-max(edges.shape[1], 1) // multiple) * multiple
    pad_node = nodes.shape[0]
    nodes = torch.cat([nodes, nodes.new_zeros(num_nodes - nodes.shape[0])])
    extra = num_edges - edges.shape[1]
    edges = torch.cat([edges, edges.new_full((2, extra), pad_node)], dim=1)
    relations = torch.cat([relations, relations.new_zeros(extra)])
    if edge_labels is not None:
        edge_labels = torch.cat([edge_labels, edge_labels.new_full((extra,), -100)])
    return nodes, edges, relations, edge_labels
