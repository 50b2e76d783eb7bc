"""Cached knowledge encodings of Roof-Transformer's frozen KB encoder (paper §4.4)."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from keplm.file_utils import cache_root

logger = logging.getLogger(__name__)


def default_cache_directory() -> Path:
    """``$KEPLM_CACHE/knowledge_encodings`` (default ``~/.cache/keplm/knowledge_encodings``, or under
    ``$XDG_CACHE_HOME/keplm``: :func:`keplm.file_utils.cache_root`)."""
    return cache_root() / "knowledge_encodings"


class KnowledgeEncodingCache:
    """Encodings of knowledge units by a frozen KB encoder, each unit encoded alone as ``[CLS] unit [SEP]`` once
    (Roof-Transformer §4.4), and reused across steps, epochs and runs.

    Keys are (the encoder's weights hash, the unit's token ids): another encoder, or the same encoder after its
    weights changed (noticed through the parameters' version counters), never reads another's encodings. Encodings
    live in memory and are written as safetensors shards under ``<directory>/<weights hash>/`` by :meth:`flush`
    (no pickles); a new run with the same encoder reads them back.
    """

    def __init__(self, directory: str | os.PathLike | None = None, flush_every: int = 4096):
        self.directory = Path(directory) if directory is not None else default_cache_directory()
        self.flush_every = flush_every
        self._store: dict[str, torch.Tensor] = {}
        self._new: dict[str, torch.Tensor] = {}
        self._weights_hash: str | None = None
        self._versions: int | None = None
        self.hits = self.misses = 0

    def set_directory(self, directory: str | os.PathLike) -> None:
        self.flush()
        self.directory, self._weights_hash = Path(directory), None

    # ------------------------------------------------------------------ keys
    def _check_weights(self, encoder: nn.Module) -> None:
        """(Re)compute the weights hash when the encoder's parameters changed, and load that hash's shards."""
        versions = sum(p._version for p in encoder.parameters())
        if self._weights_hash is not None and versions == self._versions:
            return
        digest = hashlib.sha256()
        for name, tensor in sorted(encoder.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().float().cpu().numpy().tobytes())
        weights_hash = digest.hexdigest()[:24]
        if weights_hash != self._weights_hash:
            self.flush()
            self._store, self._weights_hash = {}, weights_hash
            self._load_shards()
        self._versions = versions

    @property
    def folder(self) -> Path:
        return self.directory / (self._weights_hash or "unknown")

    def _load_shards(self) -> None:
        if not self.folder.is_dir():
            return
        for shard in sorted(self.folder.glob("*.safetensors")):
            self._store.update(load_file(shard))
        if self._store:
            logger.info("Read %d cached knowledge encodings from %s", len(self._store), self.folder)

    @staticmethod
    def key(token_ids: list[int]) -> str:
        return hashlib.sha1(np.asarray(token_ids, dtype=np.int64).tobytes()).hexdigest()

    def flush(self) -> None:
        """Write the encodings made since the last flush as a new shard."""
        if not self._new or self._weights_hash is None:
            return

        self.folder.mkdir(parents=True, exist_ok=True)
        index = len(list(self.folder.glob("*.safetensors")))
        shard = self.folder / f"shard-{index:05d}-{os.getpid()}.safetensors"
        partial = shard.with_suffix(".partial")  # renamed when complete: concurrent runs never read half a shard
        save_file({k: v.detach().cpu().contiguous() for k, v in self._new.items()}, partial)
        os.replace(partial, shard)
        self._new = {}

    def __len__(self) -> int:
        return len(self._store)

    # ------------------------------------------------------------------ encoding
    @torch.no_grad()
    def _encode_missing(self, encoder: nn.Module, sequences: dict[str, list[int]], device) -> None:
        missing = [(key, ids) for key, ids in sequences.items() if key not in self._store]
        self.hits += len(sequences) - len(missing)
        self.misses += len(missing)
        for start in range(0, len(missing), 64):
            chunk = missing[start : start + 64]
            length = max(len(ids) for _, ids in chunk)
            input_ids = torch.zeros(len(chunk), length, dtype=torch.long, device=device)
            mask = torch.zeros_like(input_ids)
            for row, (_, ids) in enumerate(chunk):
                input_ids[row, : len(ids)] = torch.tensor(ids, device=device)
                mask[row, : len(ids)] = 1
            states = encoder(
                input_ids=input_ids, attention_mask=mask, token_type_ids=torch.zeros_like(input_ids), return_dict=True
            ).last_hidden_state
            for row, (key, ids) in enumerate(chunk):
                encoding = states[row, : len(ids)].float()
                self._store[key] = encoding
                self._new[key] = encoding
        if len(self._new) >= self.flush_every:
            self.flush()

    def encode(
        self, encoder: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, unit_ids: torch.Tensor
    ) -> torch.Tensor:
        """``[batch, N, hidden]`` knowledge states in the joint layout ``[CLS] u_1 [SEP] u_2 [SEP] ...``: each unit
        encoded alone, its token states at its positions, its [SEP] state at the [SEP] after it, the first unit's
        [CLS] state at position 0 (an example without units: the encoding of ``[CLS]`` alone)."""
        self._check_weights(encoder)
        ids, mask, units = input_ids.tolist(), attention_mask.bool().tolist(), unit_ids.tolist()
        layouts = []  # per example: [(key, token positions, sep position)], or ("empty", key)
        sequences: dict[str, list[int]] = {}
        for row in range(len(ids)):
            positions: dict[int, list[int]] = {}
            for j, (unit, present) in enumerate(zip(units[row], mask[row])):
                if present and unit >= 0:
                    positions.setdefault(unit, []).append(j)
            cls = ids[row][0]
            if not positions:  # no triple selected: the knowledge is [CLS] alone, as the joint encoder reads it
                key = self.key([cls])
                sequences[key] = [cls]
                layouts.append([(key, [], None)])
                continue
            layout = []
            for unit in sorted(positions):
                tokens = positions[unit]
                sep_position = tokens[-1] + 1
                if sep_position >= len(ids[row]) or not mask[row][sep_position]:
                    raise ValueError(f"knowledge unit {unit} of example {row} is not followed by its [SEP] token")
                sequence = [cls, *(ids[row][j] for j in tokens), ids[row][sep_position]]
                key = self.key(sequence)
                sequences[key] = sequence
                layout.append((key, tokens, sep_position))
            layouts.append(layout)
        self._encode_missing(encoder, sequences, input_ids.device)
        hidden = next(iter(self._store.values())).shape[-1]
        out = torch.zeros(*input_ids.shape, hidden, device=input_ids.device)
        for row, layout in enumerate(layouts):
            first_key = layout[0][0]
            out[row, 0] = self._store[first_key][0].to(out.device)
            for key, tokens, sep_position in layout:
                if sep_position is None:
                    continue
                encoding = self._store[key].to(out.device)
                out[row, tokens] = encoding[1:-1]
                out[row, sep_position] = encoding[-1]
        return out


__all__ = ["KnowledgeEncodingCache", "default_cache_directory"]
