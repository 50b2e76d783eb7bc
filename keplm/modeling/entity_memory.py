"""Entity memory (KALA, Definition 2 and appendix B.1)."""

from __future__ import annotations

import torch
from torch import nn

from .base import check_index_range

NULL_ENTITY_INDEX = 0


class EntityEmbedding(nn.Embedding):
    """The table of :class:`EntityMemory` (its own class so that ``_init_weights`` can give it its own scale)."""


class EntityMemory(nn.Module):
    """KALA Def. 2: one embedding per training entity plus the null entity (row 0, always the zero vector)."""

    def __init__(self, num_entities: int, entity_dim: int, sparse: bool = False):
        super().__init__()
        self.embeddings = EntityEmbedding(num_entities, entity_dim, padding_idx=NULL_ENTITY_INDEX, sparse=sparse)

    @property
    def num_entities(self) -> int:
        return self.embeddings.num_embeddings

    @property
    def entity_dim(self) -> int:
        return self.embeddings.embedding_dim

    @property
    def table(self) -> nn.Parameter:
        """The Parameter holding the rows (here the whole table; this process's rows in a ``ShardedEntityMemory``):
        what optimizers and parameter groups take, whichever memory class a model holds."""
        return self.embeddings.weight

    @property
    def sparse(self) -> bool:
        """Whether the table emits sparse (row-wise) gradients."""
        return self.embeddings.sparse

    def forward(self, entity_ids: torch.Tensor) -> torch.Tensor:
        check_index_range(
            entity_ids,
            0,
            self.num_entities,
            "an entity id is outside the entity memory (size {high}); "
            "unknown entities must be mapped to the null entity 0",
        )
        return self.embeddings(entity_ids)

    @torch.no_grad()
    def initialize_rows(self, rows: torch.Tensor, vectors: torch.Tensor) -> None:
        """Overwrite the given rows (appendix B.1: contextual mention features of the PLM); row 0 stays zero."""
        rows = rows.to(self.embeddings.weight.device)
        keep = rows != NULL_ENTITY_INDEX
        self.embeddings.weight[rows[keep]] = vectors[keep].to(self.embeddings.weight)
