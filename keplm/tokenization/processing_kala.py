"""KALA processor: tokenizer + knowledge assets (+ entity linker) → model inputs with per-example graphs."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from keplm.hub.assets import KnowledgeAssets
from keplm.knowledge.annotation import KnowledgeAnnotation

from .alignment import char_spans_to_token_spans, word_offsets

logger = logging.getLogger(__name__)

PROCESSOR_CONFIG = "keplm_processor_config.json"
KNOWLEDGE_COLUMNS = ("entity_token_map", "node_entity_ids", "edge_index", "edge_relation_ids")


def _as_annotation(value) -> KnowledgeAnnotation | None:
    if value is None or isinstance(value, KnowledgeAnnotation):
        return value
    return KnowledgeAnnotation.from_dict(value)


class KalaProcessor:
    """Turns text (and a question) with character-level entity mentions into KALA model inputs.

    Per feature it produces ``entity_token_map`` (the local graph node of each token's mention, -1
    elsewhere), ``node_entity_ids`` (entity-memory row per node; unseen entities → null row 0 but still a
    node, so relational retrieval can represent them from their neighbours), ``edge_index`` and
    ``edge_relation_ids`` (KG facts touching the feature's entities, both directions). QA stride windows
    each get the mentions and facts that fall inside them. Knowledge comes from precomputed annotations
    (KALA format) or, when none is given, from linking the text against the assets' KG.
    """

    model_input_names = ["input_ids", "token_type_ids", "attention_mask", *KNOWLEDGE_COLUMNS]

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        knowledge_assets: KnowledgeAssets,
        use_inverse_relations: bool = True,
        linker_kwargs: dict | None = None,
    ):
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError("KalaProcessor needs a fast tokenizer (offset mappings)")
        self.tokenizer = tokenizer
        self.knowledge_assets = knowledge_assets
        self.use_inverse_relations = use_inverse_relations
        self.linker_kwargs = dict(linker_kwargs or {})
        self._linker = None

    # ------------------------------------------------------------------ basics
    @property
    def pad_token_id(self) -> int:
        return self.tokenizer.pad_token_id

    @property
    def linker(self):
        if self._linker is None:
            if self.knowledge_assets.kg is None:
                raise ValueError("no annotation given and the knowledge assets hold no KG to link the text against")
            from keplm.knowledge.linker import EntityLinker

            self._linker = EntityLinker(self.knowledge_assets.kg, **self.linker_kwargs)
        return self._linker

    def link(self, text: str) -> KnowledgeAnnotation:
        return self.linker.link(text)

    # ------------------------------------------------------------------ graph of one feature
    def build_graph(self, mention_ids: list[str | None], triplets) -> tuple[list[int], list[list[int]], list[int]]:
        """Nodes = mentioned entities (one per distinct id; one per id-less mention) + their fact neighbours.

        Returns (node_entity_ids, edge_index [2, E], edge_relation_ids) and the node of each mention, as
        ``(nodes, edges, relations, mention_nodes)``.
        """
        assets = self.knowledge_assets
        node_of: dict[str, int] = {}
        nodes: list[int] = []
        mention_nodes = []
        for entity_id in mention_ids:
            if entity_id is None:
                mention_nodes.append(len(nodes))
                nodes.append(0)
                continue
            if entity_id not in node_of:
                node_of[entity_id] = len(nodes)
                nodes.append(assets.entity_row(entity_id))
            mention_nodes.append(node_of[entity_id])
        mentioned = set(node_of)
        sources, targets, relations = [], [], []
        inverse_offset = assets.num_relations
        for fact in triplets:
            h, r, t = (fact.h, fact.r, fact.t) if hasattr(fact, "h") else (fact["h"], fact["r"], fact["t"])
            h, t = str(h), str(t)
            if h not in mentioned and t not in mentioned:
                continue  # a fact about entities outside this window
            for entity_id in (h, t):
                if entity_id not in node_of:
                    node_of[entity_id] = len(nodes)
                    nodes.append(assets.entity_row(entity_id))
            relation = assets.relation_row(str(r))
            sources.append(node_of[t])  # message tail → head with r
            targets.append(node_of[h])
            relations.append(relation)
            if self.use_inverse_relations:  # message head → tail with r⁻¹
                sources.append(node_of[h])
                targets.append(node_of[t])
                relations.append(relation + inverse_offset)
        return nodes, [sources, targets], relations, mention_nodes

    def _knowledge_features(self, offsets, token_mask_by_part, parts) -> dict:
        """Knowledge columns of one feature. ``parts``: [(annotation, sequence-part mask)] for text/question."""
        length = len(offsets)
        token_map = np.full(length, -1, dtype=np.int64)
        mention_ids, spans, triplets = [], [], []
        for annotation, mask in zip(parts, token_mask_by_part):
            if annotation is None or not annotation.entities:
                if annotation is not None:
                    triplets.extend(annotation.triplets)
                continue
            char_spans = [(m.start, m.end) for m in annotation.entities]
            token_spans = char_spans_to_token_spans(offsets, char_spans, mask)
            for mention, (first, last) in zip(annotation.entities, token_spans):
                if first >= 0:
                    mention_ids.append(None if mention.id is None else str(mention.id))
                    spans.append((first, last))
            triplets.extend(annotation.triplets)
        nodes, edges, relations, mention_nodes = self.build_graph(mention_ids, triplets)
        overlaps = 0
        for (first, last), node in zip(spans, mention_nodes):
            window = token_map[first : last + 1]
            overlaps += int((window >= 0).any())
            window[window < 0] = node  # the earlier (leftmost) mention keeps overlapping tokens
        if overlaps:
            logger.warning("%d overlapping entity mentions share tokens; the earlier mention keeps them", overlaps)
        return {
            "entity_token_map": token_map.tolist(),
            "node_entity_ids": nodes,
            "edge_index": edges,
            "edge_relation_ids": relations,
        }

    # ------------------------------------------------------------------ generic call
    def __call__(self, text: str, annotation=None, max_length: int = 512, truncation: bool = True, **kwargs) -> dict:
        """Encode one text; links it against the KG when no annotation is given."""
        annotation = _as_annotation(annotation)
        if annotation is None:
            annotation = self.link(text)
        annotation.validate(text)
        encoding = self.tokenizer(
            text, max_length=max_length, truncation=truncation, return_offsets_mapping=True, **kwargs
        )
        offsets = encoding.pop("offset_mapping")
        mask = [s == 0 for s in encoding.sequence_ids()]
        features = dict(encoding)
        features.update(self._knowledge_features(offsets, [mask], [annotation]))
        return features

    # ------------------------------------------------------------------ NER
    def prepare_ner_features(
        self,
        examples: dict,
        label_column: str | None = "ner_tags",
        annotation_column: str | None = "knowledge",
        max_length: int = 128,
        label_all_tokens: bool = False,
    ) -> dict:
        """``datasets.map(batched=True)`` function for word-level NER data (tokens + tags).

        Mention offsets refer to ``" ".join(tokens)``. The first sub-token of each word carries the label.
        """
        words_batch = examples["tokens"]
        encoding = self.tokenizer(
            words_batch, is_split_into_words=True, truncation=True, max_length=max_length, return_offsets_mapping=True
        )
        annotations = examples.get(annotation_column) if annotation_column else None
        out = {k: [] for k in ("labels", *KNOWLEDGE_COLUMNS)}
        for i, words in enumerate(words_batch):
            word_ids = encoding.word_ids(i)
            starts = word_offsets(words)[:, 0]
            local = np.asarray(encoding["offset_mapping"][i], dtype=np.int64)
            offsets = np.zeros_like(local)
            for position, word in enumerate(word_ids):
                if word is not None:
                    offsets[position] = local[position] + starts[word]
            annotation = _as_annotation(annotations[i]) if annotations is not None else None
            if annotation is None:
                annotation = self.linker.link_tokens(words)
            knowledge = self._knowledge_features(offsets, [[w is not None for w in word_ids]], [annotation])
            for key, value in knowledge.items():
                out[key].append(value)
            if label_column is not None:
                tags = examples[label_column][i]
                labels, previous = [], None
                for word in word_ids:
                    if word is None:
                        labels.append(-100)
                    elif word != previous or label_all_tokens:
                        labels.append(tags[word])
                    else:
                        labels.append(-100)
                    previous = word
                out["labels"].append(labels)
        if label_column is None:
            out.pop("labels")
        encoding.pop("offset_mapping")
        return {**encoding, **out}

    # ------------------------------------------------------------------ QA
    def prepare_qa_features(
        self,
        examples: dict,
        max_length: int = 384,
        doc_stride: int = 128,
        training: bool = True,
        annotation_column: str | None = "knowledge",
        question_annotation_column: str | None = "question_knowledge",
    ) -> dict:
        """``datasets.map(batched=True)`` function for SQuAD-style data with stride windows over the context.

        Every window keeps the context mentions (and the question mentions) that fall inside it and the
        facts touching them. Training features carry start/end positions (CLS when the answer is outside the
        window); evaluation features carry ``example_id`` and context-only ``offset_mapping``.
        """
        pad_right = self.tokenizer.padding_side == "right"
        questions = [q.lstrip() for q in examples["question"]]
        encoding = self.tokenizer(
            questions if pad_right else examples["context"],
            examples["context"] if pad_right else questions,
            truncation="only_second" if pad_right else "only_first",
            max_length=max_length,
            stride=doc_stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        context_part = 1 if pad_right else 0
        sample_map = encoding.pop("overflow_to_sample_mapping")
        context_annotations = examples.get(annotation_column) if annotation_column else None
        question_annotations = examples.get(question_annotation_column) if question_annotation_column else None
        cache: dict[int, tuple] = {}
        out = {k: [] for k in KNOWLEDGE_COLUMNS}
        extra = {"start_positions": [], "end_positions": []} if training else {"example_id": [], "offset_mapping": []}
        for i, offsets in enumerate(encoding["offset_mapping"]):
            sample = sample_map[i]
            if sample not in cache:
                context = examples["context"][sample]
                annotation = _as_annotation(context_annotations[sample]) if context_annotations is not None else None
                if annotation is None:
                    annotation = self.link(context)
                annotation.validate(context)
                question = _as_annotation(question_annotations[sample]) if question_annotations is not None else None
                cache[sample] = (annotation, question)
            annotation, question = cache[sample]
            sequence_ids = encoding.sequence_ids(i)
            context_mask = [s == context_part for s in sequence_ids]
            question_mask = [s == 1 - context_part for s in sequence_ids]
            knowledge = self._knowledge_features(offsets, [context_mask, question_mask], [annotation, question])
            for key, value in knowledge.items():
                out[key].append(value)
            if training:
                start, end = self._answer_positions(examples["answers"][sample], offsets, context_mask)
                extra["start_positions"].append(start)
                extra["end_positions"].append(end)
            else:
                extra["example_id"].append(examples["id"][sample])
                extra["offset_mapping"].append([o if m else None for o, m in zip(offsets, context_mask)])
        encoding.pop("offset_mapping")
        return {**encoding, **out, **extra}

    @staticmethod
    def _answer_positions(answers: dict, offsets, context_mask) -> tuple[int, int]:
        if not answers["answer_start"]:
            return 0, 0
        start_char = answers["answer_start"][0]
        end_char = start_char + len(answers["text"][0])
        (first, last), = char_spans_to_token_spans(offsets, [(start_char, end_char)], context_mask)
        context_positions = [i for i, m in enumerate(context_mask) if m]
        if first < 0 or offsets[context_positions[0]][0] > start_char or offsets[context_positions[-1]][1] < end_char:
            return 0, 0  # answer not fully inside this window → CLS
        return int(first), int(last)

    # ------------------------------------------------------------------ saving / loading
    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs) -> None:
        directory = Path(save_directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save_pretrained(directory)
        self.knowledge_assets.save_pretrained(directory)
        config = {
            "processor_class": type(self).__name__,
            "use_inverse_relations": self.use_inverse_relations,
            "linker_kwargs": self.linker_kwargs,
        }
        (directory / PROCESSOR_CONFIG).write_text(json.dumps(config, indent=2))

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, **kwargs) -> KalaProcessor:
        hub_kwargs = {k: v for k, v in kwargs.items() if k in ("revision", "token", "cache_dir", "local_files_only")}
        tokenizer = AutoTokenizer.from_pretrained(pretrained_model_name_or_path, **hub_kwargs)
        assets = KnowledgeAssets.from_pretrained(pretrained_model_name_or_path, **hub_kwargs)
        config = {}
        if os.path.isdir(pretrained_model_name_or_path):
            path = Path(pretrained_model_name_or_path) / PROCESSOR_CONFIG
            if path.is_file():
                config = json.loads(path.read_text())
        else:
            from huggingface_hub import hf_hub_download

            config = json.loads(Path(hf_hub_download(str(pretrained_model_name_or_path), PROCESSOR_CONFIG, **hub_kwargs)).read_text())
        config.pop("processor_class", None)
        return cls(tokenizer, assets, **config)
