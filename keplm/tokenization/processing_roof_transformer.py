"""Roof-Transformer's processor (paper §3.3, §4.3): the spine's features plus the knowledge encoder's sequence of
verbalised triples, built by the steps of ``keplm/tokenization/roof_knowledge.py``."""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from keplm.knowledge.annotation import KnowledgeAnnotation
from keplm.knowledge.assets import KnowledgeAssets
from keplm.knowledge.linker import link_dataset

from .processing_utils import KeplmProcessor, annotation_columns_for, as_annotation
from .roof_knowledge import (
    KNOWLEDGE_COLUMNS,
    LANGUAGES,
    SELECTION_MODES,
    TRIPLES_COLUMN,
    VERBALIZATIONS,
    KnowledgeInput,
    KnowledgeTriple,
    fit_knowledge,
    iter_units,
    name_triples,
    passage_entity_ids,
    resolve_triples,
    select_triples,
    special_ids,
)

#: the column that carries an example's knowledge through the QA feature preparation
_QA_CARRIER = "_roof_knowledge"


class _CarriedAnnotation(KnowledgeAnnotation):
    """A passage annotation that carries its example's knowledge features through the base class's QA windows."""

    def __init__(self, annotation: KnowledgeAnnotation | None, knowledge: dict):
        super().__init__(
            list(annotation.entities) if annotation else [], list(annotation.triplets) if annotation else []
        )
        self.knowledge = knowledge


# ------------------------------------------------------------------------------------------------- processor
class RoofTransformerProcessor(KeplmProcessor):
    """The spine's text features plus, per feature, the ``knowledge_input_ids`` family (paper §3.3):
    ``knowledge_input_ids`` = ``[CLS] unit_1 [SEP] unit_2 [SEP] ...`` (the tokenizer's special tokens; ``[CLS]`` alone
    when no triple is selected), ``knowledge_attention_mask`` (1 on every emitted token), ``knowledge_unit_ids`` (each
    token's unit, -1 on ``[CLS]`` / ``[SEP]``: the cached KB encoder encodes ``[CLS] unit_i [SEP]`` alone; the
    collator pads it by name, so read it where ``knowledge_attention_mask`` is 1), and the scalars
    :data:`COUNT_COLUMNS`. The passage searched is ``knowledge_features``' first annotation (QA: the context,
    never the question; the same knowledge in every stride window) or both sentences of a pair (first, then second).

    Settings saved in ``processor_config.json``: ``selection``, ``verbalization``, ``language``, ``pronoun`` /
    ``zh_pronoun`` (Exp2), ``max_knowledge_length`` (tokens after ``[CLS]``), ``linker_kwargs``; the defaults are the
    paper's best (appendix 6.2-6.3: Exp2 + Has_Tail, 511).
    """

    model_input_names = ["input_ids", "token_type_ids", "attention_mask", *KNOWLEDGE_COLUMNS]
    sequence_families = {
        "input_ids": KeplmProcessor.sequence_families["input_ids"],
        "knowledge_input_ids": KNOWLEDGE_COLUMNS,
    }

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        knowledge_assets: KnowledgeAssets | None = None,
        selection: str = "has_tail",
        verbalization: str = "exp2",
        language: str = "auto",
        pronoun: str = "he",
        zh_pronoun: str = "他",
        max_knowledge_length: int = 511,
        linker_kwargs: dict | None = None,
    ):
        super().__init__(tokenizer, knowledge_assets, linker_kwargs)
        for value, allowed, what in (
            (selection, SELECTION_MODES, "selection"),
            (language, LANGUAGES, "language"),
            (verbalization, VERBALIZATIONS, "verbalization"),
        ):
            if value not in allowed:
                raise ValueError(f"{what} must be one of {allowed}, got {value!r}")
        if not isinstance(max_knowledge_length, int) or max_knowledge_length < 0:
            raise ValueError(f"max_knowledge_length must be an int >= 0, got {max_knowledge_length!r}")
        special_ids(tokenizer)
        self.selection, self.verbalization, self.language = selection, verbalization, language
        self.pronoun, self.zh_pronoun, self.max_knowledge_length = pronoun, zh_pronoun, max_knowledge_length

    def processor_config(self) -> dict:
        return {
            **super().processor_config(),
            "selection": self.selection,
            "verbalization": self.verbalization,
            "language": self.language,
            "pronoun": self.pronoun,
            "zh_pronoun": self.zh_pronoun,
            "max_knowledge_length": self.max_knowledge_length,
        }

    def check_config(self, config) -> None:
        """ValueError when the knowledge sequence would not fit the KB encoder's positions, or the config records
        another ``max_knowledge_length``."""
        super().check_config(config)
        if not getattr(config, "uses_knowledge", True):
            return
        encoder = getattr(config, "knowledge_encoder_config", None)
        positions = getattr(encoder, "max_position_embeddings", None)
        if positions is not None and self.max_knowledge_length + 1 > positions:
            raise ValueError(
                f"max_knowledge_length={self.max_knowledge_length} + [CLS] exceeds the knowledge "
                f"encoder's {positions} positions"
            )
        recorded = getattr(config, "max_knowledge_length", None)
        if recorded is not None and recorded != self.max_knowledge_length:
            raise ValueError(
                f"the processor builds {self.max_knowledge_length} knowledge tokens but the model was "
                f"configured with max_knowledge_length={recorded}"
            )

    # ------------------------------------------------------------------ knowledge of one example
    def select(self, annotations: Sequence[KnowledgeAnnotation | None]) -> list[KnowledgeTriple]:
        """Named triples selected from the KG for a passage given by its annotations (see the module docstring)."""
        if self.kg is None:
            raise ValueError(
                "Roof-Transformer selects triples from a knowledge graph and the processor holds none: "
                "pass KnowledgeAssets(kg=kg), or precomputed triple lists"
            )
        return name_triples(self.kg, select_triples(self.kg, passage_entity_ids(annotations), self.selection))

    def facts_read(self, annotation: dict) -> tuple[list[dict], str | None]:
        """The KG's triples selected for a passage (by id), read from the ``knowledge_triples`` column, whatever
        facts the annotation carries: Roof selects from the KG, not from the annotation."""
        rows = select_triples(self.kg, passage_entity_ids([as_annotation(annotation)]), self.selection)
        ents, rels = self.kg.entity_ids, self.kg.relation_ids
        return [{"h": ents[h], "r": rels[r], "t": ents[t]} for h, r, t in rows], TRIPLES_COLUMN

    def build_knowledge(
        self, triples: Sequence[KnowledgeTriple], max_knowledge_length: int | None = None
    ) -> KnowledgeInput:
        """Verbalise and fit named triples (in order) into the knowledge budget."""
        budget = self.max_knowledge_length if max_knowledge_length is None else max_knowledge_length
        units = iter_units(triples, self.verbalization, self.language, self.pronoun, self.zh_pronoun)
        return fit_knowledge(units, self.tokenizer, budget, num_selected=len(triples))

    def knowledge_for_texts(
        self,
        texts: Sequence[str],
        annotations: Sequence | None = None,
        triples: Sequence[Sequence[str]] | None = None,
        max_knowledge_length: int | None = None,
        triple_ids: str = "auto",
    ) -> KnowledgeInput:
        """The knowledge of one example whose passage is ``texts``: precomputed ``triples`` if given, else triples
        selected by the texts' annotations (each linked when its annotation is None)."""
        if triples is not None:
            return self.build_knowledge(resolve_triples(self.kg, triples, triple_ids), max_knowledge_length)
        annotations = list(annotations) if annotations is not None else [None] * len(texts)
        if len(annotations) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(annotations)} annotations")
        resolved = []
        for text, annotation in zip(texts, annotations):
            annotation = as_annotation(annotation)
            resolved.append((self.link(text) if annotation is None else annotation).validate(text))
        return self.build_knowledge(self.select(resolved), max_knowledge_length)

    def knowledge_features(self, offsets, masks, annotations) -> dict:
        """The spine hook: the knowledge of the passage = ``annotations[0]`` (offsets and masks are not needed: the
        knowledge does not depend on the window)."""
        passage = annotations[0] if annotations else None
        if isinstance(passage, _CarriedAnnotation):
            return passage.knowledge
        return self.build_knowledge(self.select([passage])).features()

    # ------------------------------------------------------------------ datasets.map functions
    def link_text_columns(
        self,
        dataset,
        text_columns: Sequence[str] = ("sentence1", "sentence2"),
        output_columns: Sequence[str] | None = None,
        num_proc: int | None = None,
    ):
        """``link_dataset`` for each text column; outputs default to :func:`annotation_columns_for`."""
        if self.kg is None:
            raise ValueError("linking needs a knowledge graph, and the processor holds none")
        outputs = list(output_columns) if output_columns is not None else annotation_columns_for(len(text_columns))
        for column, output in zip(text_columns, outputs):
            dataset = link_dataset(
                dataset,
                self.kg,
                self.linker_kwargs,
                column,
                output_column=output,
                linker=self.cached_linker(),
                num_proc=num_proc,
            )
        return dataset

    def prepare_pair_features(
        self,
        examples: dict,
        text_columns: Sequence[str] = ("sentence1", "sentence2"),
        label_column: str | None = "label",
        max_length: int = 128,
        max_knowledge_length: int | None = None,
        annotation_columns: Sequence[str | None] | None = None,
        triples_column: str | None = TRIPLES_COLUMN,
        with_knowledge: bool = True,
        triple_ids: str = "auto",
        append_knowledge: bool = False,
        max_total_length: int | None = None,
    ) -> dict:
        """``datasets.map(batched=True)`` function for sentence(-pair) classification / regression (GLUE): one feature
        per example, ``[CLS] s1 [SEP] s2 [SEP]`` truncated to ``max_length`` (one text column: CoLA, SST-2),
        ``labels`` from ``label_column`` (int, or float for STS-B; None: no labels), and the knowledge of both texts.
        Knowledge comes from ``triples_column`` when the batch has it, else from the annotation columns (default
        ``knowledge``, ``knowledge_2``, ...; see :meth:`link_text_columns`), else from linking the texts.
        ``append_knowledge``: the one-encoder baseline with knowledge (paper §4.6): the verbalised units follow the
        text in ``input_ids`` (token type B) up to ``max_total_length`` (default ``max_length``: the text is truncated
        to ``max_length`` first, so knowledge never displaces text) instead of forming their own sequence; the
        appended and the cut knowledge tokens are counted per example."""
        texts, _, out = self.encode_pairs(examples, text_columns, label_column, max_length)
        if not with_knowledge:
            return out
        appended = append_knowledge
        columns = annotation_columns if annotation_columns is not None else annotation_columns_for(len(texts))
        annotations = [examples[c] if c is not None and c in examples else None for c in columns]
        triples = examples[triples_column] if triples_column is not None and triples_column in examples else None
        for i in range(len(texts[0])):
            knowledge = self.knowledge_for_texts(
                [text[i] for text in texts],
                [column[i] if column is not None else None for column in annotations],
                triples[i] if triples is not None else None,
                max_knowledge_length,
                triple_ids,
            )
            if appended:  # one encoder reads the text, then the units: "[CLS] s1 [SEP] s2 [SEP] u1 [SEP] u2 [SEP]"
                room = (max_total_length or max_length) - len(out["input_ids"][i])
                units = knowledge.input_ids[1 : 1 + room]
                out["input_ids"][i] = out["input_ids"][i] + units
                out["attention_mask"][i] = out["attention_mask"][i] + [1] * len(units)
                if "token_type_ids" in out:
                    out["token_type_ids"][i] = out["token_type_ids"][i] + [1] * len(units)
                out.setdefault("num_appended_knowledge_tokens", []).append(len(units))
                out.setdefault("num_cut_knowledge_tokens", []).append(len(knowledge.input_ids) - 1 - len(units))
                continue
            for key, value in knowledge.features().items():
                out.setdefault(key, []).append(value)
        return out

    def prepare_qa_features(
        self,
        examples: dict,
        max_length: int = 384,
        doc_stride: int = 128,
        training: bool = True,
        annotation_column: str | None = "knowledge",
        question_annotation_column: str | None = "question_knowledge",
        with_knowledge: bool = True,
        triples_column: str | None = TRIPLES_COLUMN,
        max_knowledge_length: int | None = None,
        triple_ids: str = "auto",
    ) -> dict:
        """The base class's stride windows, each with its example's knowledge, selected once per example from the
        context (``annotation_column`` or linking) or read from ``triples_column``. The question is not searched
        (``question_annotation_column`` is accepted for the base signature and ignored)."""
        if not with_knowledge:
            return super().prepare_qa_features(
                examples, max_length=max_length, doc_stride=doc_stride, training=training, with_knowledge=False
            )
        contexts = examples["context"]
        annotations = examples.get(annotation_column) if annotation_column else None
        triples = examples.get(triples_column) if triples_column else None
        carried = []
        for i, context in enumerate(contexts):
            annotation = as_annotation(annotations[i]) if annotations is not None else None
            if triples is None and annotation is None:
                annotation = self.link(context)
            knowledge = self.knowledge_for_texts(
                [context], [annotation], triples[i] if triples is not None else None, max_knowledge_length, triple_ids
            )
            carried.append(_CarriedAnnotation(annotation, knowledge.features()))
        examples = {**examples, _QA_CARRIER: carried}
        return super().prepare_qa_features(
            examples,
            max_length=max_length,
            doc_stride=doc_stride,
            training=training,
            annotation_column=_QA_CARRIER,
            question_annotation_column=None,
        )


__all__ = ["RoofTransformerProcessor"]
