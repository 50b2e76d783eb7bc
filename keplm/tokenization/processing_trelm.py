"""TRELM processor: the shared processor plus the entity positions TRELM pre-training reads (paper 3.1–3.2)."""

from __future__ import annotations

import logging
import os

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from keplm.knowledge.assets import KnowledgeAssets
from keplm.knowledge.loaders import load_kg

from .processing_utils import KeplmProcessor

logger = logging.getLogger(__name__)

KNOWLEDGE_COLUMNS = ("entity_ids", "mention_token_map", "inject_mask")
TARGET_COLUMNS = ("cka_labels", "cka_token_index")


class TrelmProcessor(KeplmProcessor):
    """Turns corpus text with entity mentions (KALA annotations, or linking) into TRELM pre-training features.

    Per feature, token-level: ``entity_ids`` (entity-vocabulary row of each mention token, 0 elsewhere or for an
    entity outside the vocabulary), ``mention_token_map`` (mention index, −1 elsewhere: the memory bank's spans),
    ``inject_mask`` (tokens of important mentions, where knowledge is injected: 3.1), ``cka_labels`` (the tokens of
    each fact's tail entity when its head is mentioned too: masked by the collator and decoded against negatives,
    eq. 2; −100 elsewhere) and ``cka_token_index`` (which token of the tail mention). ``special_tokens_mask`` lets
    the collator leave special tokens unmasked. Which mentions are important comes from the ``important`` column
    (one flag per mention, :func:`keplm.knowledge.importance.select_important`); without it every mention is.
    A mention that is a CKA target is never injected (its tokens are masked).
    """

    model_input_names = ["input_ids", "token_type_ids", "attention_mask", *KNOWLEDGE_COLUMNS]
    sequence_families = {
        "input_ids": (*KeplmProcessor.sequence_families["input_ids"], *KNOWLEDGE_COLUMNS, *TARGET_COLUMNS)
    }

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        knowledge_assets: KnowledgeAssets | None = None,
        linker_kwargs: dict | None = None,
        max_name_tokens: int = 8,
    ):
        super().__init__(tokenizer, knowledge_assets, linker_kwargs)
        self.max_name_tokens = max_name_tokens

    def processor_config(self) -> dict:
        return {**super().processor_config(), "max_name_tokens": self.max_name_tokens}

    def check_config(self, config) -> None:
        super().check_config(config)
        size = getattr(config, "entity_vocab_size", None)
        if (
            size is not None
            and getattr(config, "uses_knowledge_assets", False)
            and self.knowledge_assets.entity_vocab
            and size != self.knowledge_assets.num_entities
        ):
            raise ValueError(
                f"the processor's entity vocabulary has {self.knowledge_assets.num_entities} rows but "
                f"the model was built for {size}"
            )

    # ------------------------------------------------------------------ knowledge updates
    def update_knowledge(self, kg, model=None, add_entities: bool = True) -> dict:
        """:meth:`KeplmProcessor.update_knowledge` for TRELM, which reads an entity through its KG vector (3.1): the
        new KG must keep the vectors of the entities the model was trained with (``keplm train-kge
        --keep_vectors_from``; another vector space is a ValueError), and with ``add_entities`` every entity new to
        the KG that has a vector gets an entity row, so it is injected (TRELM has no trained per-entity weight:
        :meth:`~keplm.modeling.modeling_trelm.TrelmPreTrainedModel.extend_entity_vocabulary`). The report adds
        ``entity_rows_added``."""
        if isinstance(kg, (str, os.PathLike)):
            kg = load_kg(kg)
        self._check_same_vectors(kg)
        old = self.kg
        report = super().update_knowledge(kg, model=model)
        report["entity_rows_added"] = 0
        if add_entities and kg.entity_vectors is not None:
            new = [e for e in kg.entity_ids if old is None or not old.has_entity(e)]
            extended = self.knowledge_assets.with_entities(new)
            report["entity_rows_added"] = extended.num_entities - self.knowledge_assets.num_entities
            if model is not None:
                model.extend_entity_vocabulary(extended)
            self.knowledge_assets = extended
        logger.info("TRELM entity rows added for new KG entities: %d", report["entity_rows_added"])
        return report

    def _check_same_vectors(self, kg) -> None:
        """A ValueError unless ``kg`` has the current KG's vectors for every vocabulary entity the two share."""
        old = self.kg
        if old is None or old.entity_vectors is None:
            return
        if getattr(kg, "entity_vectors", None) is None:
            raise ValueError(
                "the model reads KG vectors, but the new KG has none: train them with `keplm train-kge "
                "--keep_vectors_from <the old KG folder>`"
            )
        shared = [e for e in self.knowledge_assets.entity_vocab[1:] if old.has_entity(e) and kg.has_entity(e)]
        if not shared:
            return
        before = np.asarray(old.entity_vectors)[[old.entity_index(e) for e in shared]]
        after = np.asarray(kg.entity_vectors)[[kg.entity_index(e) for e in shared]]
        moved = (
            len(shared)
            if before.shape != after.shape
            else int((~np.isclose(before, after, rtol=0.0, atol=1e-6)).any(axis=1).sum())
        )
        if moved:
            raise ValueError(
                f"the new KG's vectors differ for {moved} of the {len(shared)} entities the model was "
                f"trained with: the model reads them as learned, so train the new vectors with `keplm "
                f"train-kge --keep_vectors_from <the old KG folder>`"
            )

    # ------------------------------------------------------------------ features
    def prepare_pretraining_features(
        self,
        examples: dict,
        text_column: str = "text",
        annotation_column: str | None = "knowledge",
        important_column: str = "important",
        max_length: int = 128,
        with_knowledge: bool = True,
        knowledge_targets: bool = True,
    ) -> dict:
        """``datasets.map(batched=True)`` function: one feature per text (truncated to ``max_length``).
        ``with_knowledge=False`` (plain MLM): tokens only; ``knowledge_targets=False``: no CKA targets."""
        texts = examples[text_column]
        encoding = self.tokenizer(
            texts, truncation=True, max_length=max_length, return_offsets_mapping=True, return_special_tokens_mask=True
        )
        offsets_batch = encoding.pop("offset_mapping")
        out = dict(encoding)
        if not with_knowledge:
            return out
        annotations = examples.get(annotation_column) if annotation_column else None
        flags = examples.get(important_column)
        for i, text in enumerate(texts):
            annotation = self.text_annotation(annotations[i] if annotations is not None else None, text)
            important = flags[i] if flags is not None else None
            if important is not None and len(important) != len(annotation.entities):
                raise ValueError(
                    f"example {i}: {len(important)} importance flags for {len(annotation.entities)} "
                    "mentions (recompute the important column for this annotation)"
                )
            mask = [s == 0 for s in encoding.sequence_ids(i)]
            feature = self.entity_features(
                encoding["input_ids"][i], offsets_batch[i], mask, annotation, important, knowledge_targets
            )
            for key, value in feature.items():
                out.setdefault(key, []).append(value)
        return out

    def knowledge_features(self, offsets, masks, annotations) -> dict:
        """The knowledge inputs of one text (``processor(text)``, ``return_tensors="pt"``): entity rows, mention map
        and injection mask of its mentions, every mention important and none a CKA target, as
        ``prepare_pretraining_features(..., knowledge_targets=False)`` gives them."""
        feature = self.entity_features([0] * len(offsets), offsets, masks[0], annotations[0], knowledge_targets=False)
        return {key: feature[key] for key in KNOWLEDGE_COLUMNS}

    def entity_features(self, input_ids, offsets, mask, annotation, important=None, knowledge_targets=True) -> dict:
        length = len(input_ids)
        entity_ids = np.zeros(length, dtype=np.int64)
        mention_map = np.full(length, -1, dtype=np.int64)
        inject = np.zeros(length, dtype=np.int64)
        cka_labels = np.full(length, -100, dtype=np.int64)
        cka_index = np.zeros(length, dtype=np.int64)
        index_of = {id(m): k for k, m in enumerate(annotation.entities)}
        spans = self.mention_spans(np.asarray(offsets, dtype=np.int64), [mask], [annotation])
        present = {m.id for _, _, m in spans if m.id is not None}
        tails = set()
        if knowledge_targets:
            for fact in annotation.triplets:
                head, tail = str(fact.h), str(fact.t)
                if head != tail and head in present and tail in present:
                    tails.add(tail)
        assets = self.knowledge_assets
        for first, last, mention in spans:
            k = index_of[id(mention)]
            row = assets.entity_row(str(mention.id)) if mention.id is not None else 0
            entity_ids[first : last + 1] = row
            mention_map[first : last + 1] = k
            if mention.id is not None and str(mention.id) in tails:
                cka_labels[first : last + 1] = input_ids[first : last + 1]
                cka_index[first : last + 1] = np.arange(last + 1 - first)
            elif row > 0 and (important is None or important[k]):
                inject[first : last + 1] = 1
        return {
            "entity_ids": entity_ids.tolist(),
            "mention_token_map": mention_map.tolist(),
            "inject_mask": inject.tolist(),
            "cka_labels": cka_labels.tolist(),
            "cka_token_index": cka_index.tolist(),
        }

    # ------------------------------------------------------------------ CKA negatives
    def entity_name_table(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(name tokens [E, T], name lengths [E], corpus counts [E])`` of the entity vocabulary, for
        ``TrelmForMaskedLM.set_cka_entities``: each entity's KG name tokenised (first ``max_name_tokens``
        tokens; length 0 for the null row and entities without a name in the KG, never drawn as negatives)."""
        assets = self.knowledge_assets
        kg = assets.kg
        if kg is None:
            raise ValueError("the CKA negatives are entity names from the KG, and the processor holds no KG")
        size, width = assets.num_entities, self.max_name_tokens
        tokens = torch.zeros(size, width, dtype=torch.long)
        lengths = torch.zeros(size, dtype=torch.long)
        for row, entity in enumerate(assets.entity_vocab):
            if row == 0 or not kg.has_entity(entity):
                continue
            name = kg.entity_names[kg.entity_index(entity)]
            ids = self.tokenizer(name, add_special_tokens=False)["input_ids"][:width]
            tokens[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            lengths[row] = len(ids)
        counts = torch.tensor(assets.entity_counts if assets.entity_counts else [0] * size, dtype=torch.long)
        return tokens, lengths, counts


def feature_statistics(features) -> dict:
    """Counts over processed features (a Dataset or column dict): examples, mention tokens, injected tokens, CKA
    target tokens, examples with a CKA target."""
    mentions = injected = targets = with_target = 0
    rows = 0
    for entity_ids, inject, labels in zip(features["entity_ids"], features["inject_mask"], features["cka_labels"]):
        rows += 1
        mentions += sum(1 for e in entity_ids if e > 0)
        injected += sum(inject)
        count = sum(1 for t in labels if t != -100)
        targets += count
        with_target += count > 0
    return {
        "examples": rows,
        "entity_tokens": mentions,
        "injected_tokens": injected,
        "cka_target_tokens": targets,
        "examples_with_cka_target": with_target,
    }


__all__ = ["TrelmProcessor", "KNOWLEDGE_COLUMNS", "TARGET_COLUMNS", "feature_statistics"]
