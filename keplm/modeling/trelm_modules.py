"""TRELM's mechanisms (Yan et al.): knowledge injection (3.1, eq. 7), contrastive knowledge assessing (eq. 2) with
its negative sampler, and the knowledge-augmented memory bank (3.2, eq. 4–8). Knowledge routing (3.3) lives in
:mod:`keplm.modeling.knowledge_routing`."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


class KnowledgeInjection(nn.Module):
    """TRELM 3.1 and eq. (7): the input embedding of an important entity's tokens.

    ``I_p = (1 − λ)·h_e + λ/2·(M_local(e) + M_global(e))`` at the tokens of an important entity e, where
    ``h_e = W·kge(e) + b`` projects the entity's KG embedding (a frozen table filled from the knowledge assets) to
    the word-embedding space; λ·memory only where the memory bank holds e (λ = 0 otherwise). Without injection
    (``kge_dim=None``, the ablation) ``h_e`` is the token's own embedding, so only the memory mixes in. Other
    tokens keep their word embedding. ``mode="replace"`` puts ``I_p`` in place of the word embedding (the
    paper), ``"add"`` adds it.
    """

    def __init__(self, hidden_size: int, entity_vocab_size: int, kge_dim: int | None, mode: str = "replace"):
        super().__init__()
        self.mode = mode
        self.projection = nn.Linear(kge_dim, hidden_size) if kge_dim else None
        # KG embeddings per entity-vocabulary row; a KG asset, filled by TrelmPreTrainedModel.set_knowledge_assets
        self.register_buffer("kge", torch.zeros(entity_vocab_size, kge_dim or 0), persistent=False)
        self.register_buffer("has_kge", torch.zeros(entity_vocab_size, dtype=torch.bool), persistent=False)

    @torch.no_grad()
    def reset(self) -> None:
        """No KG embedding for any row (what ``set_knowledge_assets`` fills). ``from_pretrained`` allocates the
        non-persistent buffers uninitialised, so the model's ``_init_weights`` calls this."""
        self.kge.zero_()
        self.has_kge.zero_()

    @torch.no_grad()
    def grow(self, rows: int) -> None:
        """``rows`` more entity-vocabulary rows (empty: :meth:`set_table` fills them)."""
        self.kge = torch.cat([self.kge, self.kge.new_zeros((rows, self.kge.shape[1]))])
        self.has_kge = torch.cat([self.has_kge, self.has_kge.new_zeros(rows)])

    def set_table(self, vectors: torch.Tensor, known: torch.Tensor) -> None:
        if self.projection is None:
            return
        if vectors.shape != self.kge.shape:
            raise ValueError(
                f"KG embedding table of shape {tuple(vectors.shape)}, the model expects "
                f"{tuple(self.kge.shape)} (entity vocabulary x kge_dim)"
            )
        self.kge.copy_(vectors)
        self.has_kge.copy_(known)

    def forward(
        self,
        word_embeddings: torch.Tensor,
        entity_ids: torch.Tensor,
        inject_mask: torch.Tensor,
        memory: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        lam: float = 0.0,
    ) -> torch.Tensor:
        """``word_embeddings`` [B, L, H], ``entity_ids`` [B, L] (entity-vocabulary row per token), ``inject_mask``
        [B, L] (tokens of important entities); ``memory`` [B, L, H] = M_local + M_global per token and
        ``memory_mask`` [B, L] where the bank holds the token's entity."""
        if self.projection is not None:
            inject_mask = inject_mask & self.has_kge[entity_ids]
            knowledge = self.projection(self.kge[entity_ids].to(self.projection.weight.dtype))
        else:
            knowledge = word_embeddings
        knowledge = knowledge.to(word_embeddings.dtype)
        if memory is not None and lam > 0:
            weight = (lam * memory_mask.to(word_embeddings.dtype)).unsqueeze(-1)
            knowledge = (1 - weight) * knowledge + weight / 2 * memory.to(word_embeddings.dtype)
        mask = inject_mask.unsqueeze(-1)
        if self.mode == "add" and self.projection is not None:
            return word_embeddings + torch.where(mask, knowledge, torch.zeros_like(knowledge))
        return torch.where(mask, knowledge, word_embeddings)


class ContrastiveKnowledgeLoss(nn.Module):
    """TRELM eq. (2): ``−log exp f(h, y) / (exp f(h, y) + Σ_{y'∼Q(y)} exp f(h, y'))`` per target token.

    ``f(h, y)`` is the MLM decoder's logit of token y for the head-transformed state h (``h·W_y + b_y``), so CKA
    and MLM share the output layer. Negatives equal to the target are left out of the sum. :meth:`probability`
    is eq. (9)'s sampled-softmax probability of the correct token, the quantity knowledge routing attributes.
    """

    @staticmethod
    def logits(
        states: torch.Tensor,
        targets: torch.Tensor,
        negatives: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
    ) -> torch.Tensor:
        """``[N, 1 + K]`` logits of the target (column 0) and its K negatives; a negative equal to its target
        gets −inf."""
        candidates = torch.cat([targets.unsqueeze(1), negatives], dim=1)
        logits = torch.einsum("nh,nkh->nk", states, weight[candidates].to(states.dtype))
        if bias is not None:
            logits = logits + bias[candidates].to(logits.dtype)
        duplicate = torch.cat(
            [torch.zeros_like(targets, dtype=torch.bool).unsqueeze(1), negatives == targets.unsqueeze(1)], dim=1
        )
        return logits.float().masked_fill(duplicate, float("-inf"))

    def forward(self, states, targets, negatives, weight, bias=None) -> torch.Tensor:
        if targets.numel() == 0:  # no knowledge target in the batch: zero, still tied to the graph
            return states.sum() * 0.0
        logits = self.logits(states, targets, negatives, weight, bias)
        return -torch.log_softmax(logits, dim=-1)[:, 0].mean()

    def probability(self, states, targets, negatives, weight, bias=None) -> torch.Tensor:
        """Eq. (9): p(y* | x) under the sampled softmax, one value per target."""
        return torch.softmax(self.logits(states, targets, negatives, weight, bias), dim=-1)[:, 0]


class NegativeSampler(nn.Module):
    """``Q(y)`` of eq. (2): a negative for the i-th token of a tail entity is the i-th token of another entity's name
    (its last token when the name is shorter), the entity drawn ``"uniform"``-ly or by corpus ``"frequency"``.
    Without an entity-name table (:meth:`set_entities`) negatives are uniform over the vocabulary's ordinary
    tokens (ids from ``first_token_id``)."""

    def __init__(self, vocab_size: int, mode: str = "uniform", first_token_id: int = 0):
        super().__init__()
        self.mode, self.vocab_size, self.first_token_id = mode, vocab_size, first_token_id
        self.register_buffer("name_tokens", torch.zeros(0, 0, dtype=torch.long), persistent=False)
        self.register_buffer("name_lengths", torch.zeros(0, dtype=torch.long), persistent=False)
        self.register_buffer("weights", torch.zeros(0), persistent=False)

    def set_entities(self, name_tokens: torch.Tensor, name_lengths: torch.Tensor, counts: torch.Tensor) -> None:
        """``name_tokens`` [E, T] token ids of each entity's name (padded), ``name_lengths`` [E] (0: no name, never
        drawn), ``counts`` [E] corpus frequencies (the ``"frequency"`` sampler's weights)."""
        if name_tokens.shape[0] != name_lengths.shape[0] or name_lengths.shape != counts.shape:
            raise ValueError("name_tokens, name_lengths and counts must have one row per entity")
        usable = name_lengths > 0
        if not usable.any():
            raise ValueError("no entity has a tokenised name: the CKA sampler has nothing to draw from")
        weights = (
            counts.float().clamp(min=0) if self.mode == "frequency" else torch.ones_like(counts, dtype=torch.float)
        )
        weights = torch.where(usable, weights, torch.zeros_like(weights))
        if weights.sum() <= 0:
            raise ValueError("every usable entity has count 0: the frequency sampler has nothing to draw from")
        device = self.name_tokens.device
        self.name_tokens, self.name_lengths, self.weights = (
            name_tokens.to(device),
            name_lengths.to(device),
            weights.to(device),
        )

    def forward(
        self, token_index: torch.Tensor, num_negatives: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``[N, K]`` negative token ids for targets that are token ``token_index`` [N] of their entity."""
        count = token_index.shape[0]
        if self.weights.numel() == 0:
            return torch.randint(
                self.first_token_id,
                self.vocab_size,
                (count, num_negatives),
                device=token_index.device,
                generator=generator,
            )
        entities = (
            torch.multinomial(self.weights, count * num_negatives, replacement=True, generator=generator)
            .view(count, num_negatives)
            .to(token_index.device)
        )
        position = torch.minimum(token_index.unsqueeze(1).clamp(min=0), self.name_lengths[entities] - 1)
        return self.name_tokens[entities, position]


def gather_rows(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each tensor's rows from every process, concatenated in rank order (the tensors as they are outside a
    multi-process run). The tensors of one call have the same number of rows; processes may have different numbers."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return tensors
    world = dist.get_world_size()
    count = torch.tensor([tensors[0].shape[0]], device=tensors[0].device)
    counts = [torch.zeros_like(count) for _ in range(world)]
    dist.all_gather(counts, count)
    counts = [int(c) for c in counts]
    gathered = []
    for tensor in tensors:
        padded = tensor.new_zeros((max(counts), *tensor.shape[1:]))
        padded[: tensor.shape[0]] = tensor
        parts = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded)
        gathered.append(torch.cat([part[:n] for part, n in zip(parts, counts)]))
    return tuple(gathered)


class MemoryBank(nn.Module):
    """TRELM 3.2, eq. (4)–(8): the knowledge-augmented memory bank, a "cheat sheet" of contextual entity states.

    * local memory (eq. 4–5): for a mention spanning tokens l..r, the mean output state over the window
      l−k..r+k (clipped to the sequence's tokens; the paper's normaliser 2k + r − l counts the same window), folded
      into ``M_local(e) ← (1 − γ)·M_local(e) + γ·M_local(e, x)``; the first occurrence sets it (the paper starts
      from pretrained embeddings: an entity is only read once it has been seen).
    * global memory (eq. 6): the mean last-layer [CLS] state over the contexts that contain e (once per context).
    * λ (eq. 7–8): ``λ_q = λ / β^q`` in epoch q (:meth:`set_epoch`).

    The bank is training state: its buffers are not persistent (never in the model's weights); Trainer checkpoints
    keep them through :meth:`training_state` / :meth:`load_training_state`. Updates take no gradient.
    """

    def __init__(
        self, entity_vocab_size: int, hidden_size: int, window: int, momentum: float, lam: float, decay: float
    ):
        super().__init__()
        self.window, self.momentum, self.initial_lambda, self.decay = window, momentum, lam, decay
        self.lam = lam
        self.register_buffer("local", torch.zeros(entity_vocab_size, hidden_size), persistent=False)
        self.register_buffer("seen", torch.zeros(entity_vocab_size, dtype=torch.bool), persistent=False)
        self.register_buffer("global_sum", torch.zeros(entity_vocab_size, hidden_size), persistent=False)
        self.register_buffer("global_count", torch.zeros(entity_vocab_size), persistent=False)

    @torch.no_grad()
    def reset(self) -> None:
        """An empty bank (nothing seen). ``from_pretrained`` allocates non-persistent buffers uninitialised, so the
        model's ``_init_weights`` calls this."""
        for buffer in (self.local, self.seen, self.global_sum, self.global_count):
            buffer.zero_()

    @torch.no_grad()
    def grow(self, rows: int) -> None:
        """``rows`` more entity-vocabulary rows, empty (nothing seen)."""
        for name in ("local", "seen", "global_sum", "global_count"):
            old = getattr(self, name)
            setattr(self, name, torch.cat([old, old.new_zeros((rows, *old.shape[1:]))]))

    def set_epoch(self, epoch: int) -> float:
        """Eq. (8): λ for pre-training epoch ``epoch`` (0-based)."""
        self.lam = self.initial_lambda / self.decay ** max(int(epoch), 0)
        return self.lam

    def read(self, entity_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``M_local(e) + M_global(e)`` per token [B, L, H] and whether the bank holds the token's entity [B, L]
        (row 0, the null entity, never)."""
        known = self.seen[entity_ids] & (entity_ids > 0)
        global_mean = self.global_sum[entity_ids] / self.global_count[entity_ids].clamp(min=1).unsqueeze(-1)
        return self.local[entity_ids] + global_mean, known

    @staticmethod
    def mention_spans(mention_token_map: torch.Tensor, entity_ids: torch.Tensor):
        """``(row, first token, last token, entity row)`` of every mention (tokens sharing a mention index)."""
        batch, length = mention_token_map.shape
        valid = (mention_token_map >= 0) & (entity_ids > 0)
        rows, cols = valid.nonzero(as_tuple=True)
        if rows.numel() == 0:
            empty = rows.new_zeros(0)
            return empty, empty, empty, empty
        keys = rows * (mention_token_map.max() + 1) + mention_token_map[rows, cols]
        unique, inverse = torch.unique(keys, return_inverse=True)
        first = torch.full((unique.numel(),), length, device=rows.device).scatter_reduce(0, inverse, cols, "amin")
        last = torch.full((unique.numel(),), -1, device=rows.device).scatter_reduce(0, inverse, cols, "amax")
        span_rows = torch.zeros_like(unique).scatter_(0, inverse, rows)
        span_entities = torch.zeros_like(unique).scatter_(0, inverse, entity_ids[rows, cols])
        return span_rows, first, last, span_entities

    @torch.no_grad()
    def update(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor,
        entity_ids: torch.Tensor,
        mention_token_map: torch.Tensor,
    ) -> int:
        """Fold this batch's mentions into the bank (eq. 4–6); returns the number of mentions used. In a
        multi-process run every process folds every process's mentions, in rank order (:func:`gather_rows`), so
        the banks stay equal and match a one-process run over the processes' batches in that order; every process
        must then call this on each training step (TRELM's batches always carry ``entity_ids``)."""
        rows, first, last, entities = self.mention_spans(mention_token_map, entity_ids)
        states = hidden_states.detach().float()
        length = states.shape[1]
        positions = torch.arange(length, device=states.device)
        window = (
            (positions >= (first - self.window).unsqueeze(1))
            & (positions <= (last + self.window).unsqueeze(1))
            & attention_mask[rows].bool()
        )
        local = (window.unsqueeze(-1) * states[rows]).sum(1) / window.sum(1, keepdim=True).clamp(min=1)
        pairs = torch.unique(torch.stack([rows, entities]), dim=1)  # eq. (6): once per (context, entity)
        entities, local = gather_rows(entities, local)
        pair_entities, pair_states = gather_rows(pairs[1], states[pairs[0], 0])
        if entities.numel() == 0:
            return 0
        self._fold_local(entities, local)
        self.global_sum.index_add_(0, pair_entities, pair_states)
        self.global_count.index_add_(0, pair_entities, torch.ones_like(pair_entities, dtype=self.global_count.dtype))
        return entities.numel()

    def _fold_local(self, entities: torch.Tensor, local: torch.Tensor) -> None:
        """Eq. (5) for every mention at once, as if folded one by one in mention order: an entity met k times in
        the batch ends at ``(1−γ)^k·M + Σ_j γ(1−γ)^(k−j)·x_j`` (its first occurrence sets M when unseen). No
        per-mention Python loop or host sync on the training step."""
        count = entities.numel()
        unique, inverse, counts = torch.unique(entities, return_inverse=True, return_counts=True)
        order = torch.argsort(inverse * count + torch.arange(count, device=entities.device))  # by entity, in order
        starts = torch.cumsum(counts, 0) - counts
        rank = torch.empty_like(order)
        rank[order] = torch.arange(count, device=entities.device) - starts[inverse[order]]  # 0-based occurrence
        keep = 1.0 - self.momentum
        exponent = (counts[inverse] - 1 - rank).to(local.dtype)
        weight = self.momentum * keep**exponent
        first_sets = (~self.seen[entities]) & (rank == 0)  # an unseen entity's first occurrence replaces M
        weight = torch.where(first_sets, keep**exponent, weight)
        scale = torch.where(
            self.seen[unique], keep ** counts.to(local.dtype), torch.zeros_like(counts, dtype=local.dtype)
        )
        folded = torch.zeros(unique.numel(), local.shape[1], dtype=local.dtype, device=local.device)
        folded.index_add_(0, inverse, weight.unsqueeze(1) * local)
        self.local[unique] = scale.unsqueeze(1) * self.local[unique] + folded
        self.seen[unique] = True

    def training_state(self) -> dict[str, torch.Tensor]:
        return {
            "local": self.local,
            "seen": self.seen,
            "global_sum": self.global_sum,
            "global_count": self.global_count,
            "lambda": torch.tensor(self.lam),
        }

    def load_training_state(self, state: dict[str, torch.Tensor]) -> None:
        for name in ("local", "seen", "global_sum", "global_count"):
            if state[name].shape != getattr(self, name).shape:
                raise ValueError(
                    f"memory bank state {name} has shape {tuple(state[name].shape)}, the model's "
                    f"{tuple(getattr(self, name).shape)}: saved by a model with another entity vocabulary"
                )
            getattr(self, name).copy_(state[name])
        self.lam = float(state["lambda"])


__all__ = ["KnowledgeInjection", "ContrastiveKnowledgeLoss", "NegativeSampler", "MemoryBank", "gather_rows"]
