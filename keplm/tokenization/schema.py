"""What a processor's features hold, declared for the collator (:class:`keplm.data.collator.KeplmDataCollator`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GraphSchema:
    """Which feature keys hold a per-example graph (a processor declares it, ``graph_schema``): the node values
    (``nodes``, e.g. entity rows), the edges (``edges``, ``[2, E]`` local node indices), optional per-edge values
    (``edge_values``, e.g. relation ids or labels: padded with 0, labels with -100) and the token-level maps to
    nodes (``node_maps``, -1 off-node: offset to the batched graph's numbering). The batch keeps the same keys."""

    nodes: str = "node_entity_ids"
    edges: str = "edge_index"
    edge_values: tuple[str, ...] = ("edge_relation_ids", "edge_labels")
    node_maps: tuple[str, ...] = ("entity_token_map",)

    @property
    def keys(self) -> tuple[str, ...]:
        """The per-example graph keys (node maps are token-level: they belong to a sequence family)."""
        return (self.nodes, self.edges, *self.edge_values)


__all__ = ["GraphSchema"]
