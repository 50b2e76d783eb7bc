"""Counterfactual KG edits: how far a trained model's predictions follow one changed fact (no labels needed).

For every example the text is linked once against the processor's KG. Then, one at a time, each fact of the
annotation that touches a mention is edited (:data:`EDITS`): its relation swapped for another relation, its other
end swapped for another entity, or the fact removed. The model reads the edited annotation and the prediction is
compared with the unedited one where the fact can act (NER: the tokens of the mentions the fact touches; QA: the
start and end distributions; classification: the class distribution):

- ``flip``: the arg-max prediction changed;
- ``shift``: the total-variation distance ½‖p − q‖₁ between the two probability vectors (0: untouched, 1: disjoint).

A model that does not read its KG scores 0 on both; the report gives both per edit kind and per relation.
"""

from __future__ import annotations

import copy
import random
from collections import defaultdict
from dataclasses import dataclass, field

import torch

from keplm.data.collator import KeplmDataCollator

EDITS = ("relation", "tail", "remove")
TASKS = ("ner", "qa", "classification")
#: the task each head predicts, by the end of its architecture's name (``KalaForTokenClassification``: NER)
_TASK_OF_ARCHITECTURE = {
    "TokenClassification": "ner",
    "QuestionAnswering": "qa",
    "SequenceClassification": "classification",
}


def _task_of_name(name: str) -> str | None:
    """The task a model class predicts, from its name (``KalaForTokenClassification``: ``"ner"``), or None."""
    return next((task for suffix, task in _TASK_OF_ARCHITECTURE.items() if name.endswith(f"For{suffix}")), None)


def task_of(config) -> str:
    """The task the checks read from a model's saved architectures; a ValueError when none is one of theirs."""
    task = next(filter(None, map(_task_of_name, getattr(config, "architectures", None) or [])), None)
    if task is not None:
        return task
    raise ValueError(f"cannot tell the task of architectures {config.architectures!r}: pass --task")


@dataclass
class EditResult:
    """One edited fact of one example."""

    example: int
    edit: str
    relation: str  # the original fact's relation id
    new_relation: str | None
    flip: bool
    shift: float


@dataclass
class SensitivityReport:
    """Every edit's result and the summaries :meth:`summary` computes."""

    task: str
    num_examples: int
    examples_with_facts: int
    results: list[EditResult] = field(default_factory=list)
    relation_names: dict[str, str] = field(default_factory=dict)

    def summary(self) -> dict:
        """``{"overall": {edit: stats}, "per_relation": {relation: {edit: stats}}}``; stats: ``edits``,
        ``flip_rate`` and ``mean_shift`` (fractions)."""

        def stats(rows: list[EditResult]) -> dict:
            return {
                "edits": len(rows),
                "flip_rate": sum(r.flip for r in rows) / len(rows),
                "mean_shift": sum(r.shift for r in rows) / len(rows),
            }

        by_edit, by_relation = defaultdict(list), defaultdict(lambda: defaultdict(list))
        for row in self.results:
            by_edit[row.edit].append(row)
            by_relation[row.relation][row.edit].append(row)
        return {
            "task": self.task,
            "examples": self.num_examples,
            "examples_with_facts": self.examples_with_facts,
            "overall": {edit: stats(rows) for edit, rows in by_edit.items()},
            "per_relation": {
                relation: {
                    "name": self.relation_names.get(relation, relation),
                    **{edit: stats(rows) for edit, rows in edits.items()},
                }
                for relation, edits in sorted(by_relation.items())
            },
        }


# ---------------------------------------------------------------------------------------------- task adapters
class _Adapter:
    """How one task shape links its examples (``link``), makes features from annotations (``features``) and reads
    the predictions (``probabilities(outputs, batch, feature_index, annotation, fact)``)."""

    def __init__(self, processor, max_length: int):
        self.processor, self.max_length = processor, max_length


class _NerAdapter(_Adapter):
    def link(self, example: dict) -> dict:
        words = example.get("tokens")
        if words is None:
            text = example["text"]
            words = [w for w, _ in self.processor.tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text)]
        return {"tokens": list(words), "knowledge": self.processor.link(" ".join(words)).to_dict()}

    def features(self, example: dict) -> list[dict]:
        out = self.processor.prepare_ner_features(
            _batch_of_one(example, ("tokens", "knowledge")),
            label_column=None,
            max_length=self.max_length,
        )
        return [{k: v[0] for k, v in out.items()}]

    def probabilities(self, outputs, batch, feature_index, annotation, fact):
        """Class probabilities of the first token of each mention of the fact's ends (every mention without one)."""
        token_map = batch["entity_token_map"][feature_index]
        probs = outputs.logits[feature_index].float().softmax(-1)
        first = torch.ones_like(token_map, dtype=torch.bool)
        first[1:] = token_map[1:] != token_map[:-1]
        rows = (token_map >= 0) & first
        if fact is not None and batch["input_ids"].shape[0] == 1:
            rows &= _mention_tokens_of(annotation, {fact["h"], fact["t"]}, token_map)
        return probs[rows]


class _ClassificationAdapter(_Adapter):
    """One text (``sentence`` or ``text``) or a GLUE pair (``sentence1`` and ``sentence2``, as MRPC and RTE). A pair's
    facts are those its processor selects for the whole passage (``facts_read`` with a fact column, as Roof's):
    the two texts' links are merged into one annotation whose facts are edited."""

    def link(self, example: dict) -> dict:
        if "sentence1" in example and "sentence2" in example:
            texts = (example["sentence1"], example["sentence2"])
            annotations = [self.processor.link(text).to_dict() for text in texts]
            merged = {key: [item for a in annotations for item in a.get(key, [])] for key in ("entities", "triplets")}
            return {"sentence1": texts[0], "sentence2": texts[1], "knowledge": merged}
        text = example.get("sentence", example.get("text"))
        return {"sentence": text, "knowledge": self.processor.link(text).to_dict()}

    def features(self, example: dict) -> list[dict]:
        pair = "sentence1" in example
        if pair and example.get("fact_column") is None:
            raise ValueError(
                f"{type(self.processor).__name__} reads each text's own annotation, so a sentence "
                "pair's facts cannot be edited as one passage: check single texts"
            )
        columns = ("sentence1", "sentence2") if pair else ("sentence",)
        out = self.processor.prepare_pair_features(
            _batch_of_one(example, (*columns, "knowledge")),
            text_columns=columns,
            label_column=None,
            annotation_columns=(None, None) if pair else ("knowledge",),  # a pair's facts: the fact column's
            max_length=self.max_length,
        )
        return [{k: v[0] for k, v in out.items() if not k.startswith("num_")}]

    def probabilities(self, outputs, batch, feature_index, annotation, fact):
        return outputs.logits[feature_index].float().softmax(-1).unsqueeze(0)


class _QaAdapter(_Adapter):
    def link(self, example: dict) -> dict:
        return {
            "question": example["question"],
            "context": example["context"],
            "id": "0",
            "knowledge": self.processor.link(example["context"]).to_dict(),
            "question_knowledge": self.processor.link(example["question"]).to_dict(),
        }

    def features(self, example: dict) -> list[dict]:
        out = self.processor.prepare_qa_features(
            _batch_of_one(example, ("id", "question", "context", "knowledge", "question_knowledge")),
            max_length=self.max_length,
            doc_stride=min(128, self.max_length // 2),
            training=False,
        )
        keep = [k for k in out if k not in ("offset_mapping", "example_id")]
        return [{k: out[k][i] for k in keep} for i in range(len(out["input_ids"]))]

    def probabilities(self, outputs, batch, feature_index, annotation, fact):
        mask = batch["attention_mask"][feature_index].bool()
        ends = (outputs.start_logits, outputs.end_logits)
        return torch.stack([logits[feature_index][mask].float().softmax(-1) for logits in ends])


def _batch_of_one(example: dict, columns) -> dict:
    """``example``'s ``columns`` as a batch of one, with its facts as the feature column the processor reads them
    from when that is not the annotation (``KeplmProcessor.facts_read``)."""
    batch = {column: [example[column]] for column in columns}
    if example.get("fact_column") is not None:
        batch[example["fact_column"]] = [[[f["h"], f["r"], f["t"]] for f in example["knowledge"]["triplets"]]]
    return batch


_ADAPTERS = {"ner": _NerAdapter, "classification": _ClassificationAdapter, "qa": _QaAdapter}


def _mention_tokens_of(annotation, ends, token_map) -> torch.Tensor:
    """Tokens of the feature (``token_map``: its ``entity_token_map``) whose mention is one of the entity ids ``ends``.
    KALA numbers a feature's graph nodes mentions first, one per distinct id (one per id-less mention), in annotation
    order (``build_graph``), and a one-feature batch keeps that numbering."""
    node_of, nodes = {}, 0
    wanted = torch.zeros_like(token_map, dtype=torch.bool)
    for mention in annotation.get("entities", []):
        entity_id = mention.get("id")
        if entity_id is None or entity_id not in node_of:
            node_of[entity_id if entity_id is not None else object()] = nodes
            if entity_id in ends:
                wanted |= token_map == nodes
            nodes += 1
    return wanted if bool(wanted.any()) else token_map >= 0


# ---------------------------------------------------------------------------------------------- the measure
def edit_fact(
    annotation: dict, index: int, edit: str, relations: list[str], entities: list[str], rng: random.Random
) -> tuple[dict, str | None] | None:
    """A copy of ``annotation`` with fact ``index`` edited (``relation``, ``tail`` or ``remove``), and the new
    relation (relation edits); None where the edit has no alternative (a KG with one relation)."""
    edited = copy.deepcopy(annotation)
    fact = edited["triplets"][index]
    mentioned = {m.get("id") for m in edited.get("entities", [])}
    if edit == "remove":
        del edited["triplets"][index]
        return edited, None
    if edit == "relation":
        choices = [r for r in relations if r != fact["r"]]
        if not choices:
            return None
        fact["r"] = rng.choice(choices)
        return edited, fact["r"]
    end = "t" if fact["h"] in mentioned else "h"  # the end that is not (or not only) a mention
    choices = [e for e in entities if e not in (fact["h"], fact["t"])]
    if not choices:
        return None
    fact[end] = rng.choice(choices)
    return edited, None


def total_variation(p: torch.Tensor, q: torch.Tensor) -> float:
    """½‖p − q‖₁ averaged over the rows of two ``[rows, classes]`` probability tables."""
    if p.numel() == 0:
        return 0.0
    return float(0.5 * (p - q).abs().sum(-1).mean())


@torch.no_grad()
def knowledge_sensitivity(
    model,
    processor,
    examples: list[dict],
    task: str = "ner",
    edits: tuple[str, ...] = EDITS,
    max_facts_per_example: int = 4,
    max_length: int = 128,
    seed: int = 0,
    progress=None,
) -> SensitivityReport:
    """Edit each example's facts one at a time and compare the model's predictions (see the module docstring).

    ``examples``: dicts with ``text`` or ``tokens`` (NER), ``sentence``/``text`` or ``sentence1`` and ``sentence2``
    (classification), ``question`` and ``context`` (QA). The facts edited are those the processor says its model
    reads (``facts_read``: the annotation's, or the KG triples a processor selects itself). Replacement relations
    are the relation vocabulary's (those the model has embeddings for), else the KG's; replacement entities are
    those with an entity-memory row where the model has one, else the KG's. ``progress``: an optional wrapper of
    the example iterator (e.g. a tqdm factory).
    """
    if task not in _ADAPTERS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    unknown = set(edits) - set(EDITS)
    if unknown:
        raise ValueError(f"unknown edits {sorted(unknown)}; choose from {EDITS}")
    if processor.kg is None:
        raise ValueError("the counterfactual measure needs a processor with a knowledge graph")
    if not getattr(model.config, "uses_knowledge", False):
        raise ValueError(f"{type(model).__name__} reads no knowledge (a baseline): there is nothing to edit")
    head = getattr(model, "get_base_model", lambda: model)()  # a LoRA adapter: the model inside
    predicts = _task_of_name(type(head).__name__)
    if predicts != task:
        raise ValueError(
            f"task {task!r} needs a model that predicts it; {type(head).__name__} predicts "
            + (f"{predicts!r}: pass task={predicts!r}" if predicts else f"none of {TASKS}: it cannot be checked here")
        )
    adapter = _ADAPTERS[task](processor, max_length)
    assets = processor.knowledge_assets
    relations = assets.relation_vocab[2:] or list(processor.kg.relation_ids)  # the two reserved ids left out
    entities = [e for e in assets.entity_vocab[1:] if processor.kg.has_entity(e)] or list(processor.kg.entity_ids)
    collator = KeplmDataCollator.from_processor(processor, model)
    rng = random.Random(seed)
    model.eval()
    relation_names = dict(zip(processor.kg.relation_ids, processor.kg.relation_names))
    report = SensitivityReport(task, len(examples), 0, relation_names=relation_names)
    for number, example in enumerate(progress(examples) if progress is not None else examples):
        linked = adapter.link(example)
        annotation = linked["knowledge"]
        annotation["triplets"], linked["fact_column"] = processor.facts_read(annotation)
        mentioned = {m.get("id") for m in annotation.get("entities", [])}  # facts' ends are ids, never None
        facts = [i for i, f in enumerate(annotation["triplets"]) if f["h"] in mentioned or f["t"] in mentioned]
        if not facts:
            continue
        report.examples_with_facts += 1
        base = _predict(model, collator, adapter, linked)
        for index in rng.sample(facts, min(max_facts_per_example, len(facts))):
            fact = annotation["triplets"][index]
            for edit in edits:
                made = edit_fact(annotation, index, edit, relations, entities, rng)
                if made is None:
                    continue
                edited, new_relation = made
                after = _predict(model, collator, adapter, {**linked, "knowledge": edited})
                p = _read(adapter, base, annotation, fact)
                q = _read(adapter, after, annotation, fact)
                if p.shape != q.shape:
                    raise RuntimeError(f"example {number}: the edit changed the prediction's shape")
                report.results.append(
                    EditResult(
                        number,
                        edit,
                        fact["r"],
                        new_relation,
                        bool((p.argmax(-1) != q.argmax(-1)).any()),
                        total_variation(p, q),
                    )
                )
    return report


def _predict(model, collator, adapter, linked: dict):
    batch = collator(adapter.features(linked))
    return model(**{k: v for k, v in batch.items() if k != "labels"}), batch


def _read(adapter, prediction, annotation, fact) -> torch.Tensor:
    """The rows of every feature of one example, right-padded with zero probability to one width: QA windows of one
    context differ in length, and a zero column adds nothing to the total variation."""
    outputs, batch = prediction
    rows = [adapter.probabilities(outputs, batch, i, annotation, fact) for i in range(batch["input_ids"].shape[0])]
    width = max(row.shape[-1] for row in rows)
    return torch.cat([torch.nn.functional.pad(row, (0, width - row.shape[-1])) for row in rows])


__all__ = [
    "task_of",
    "EDITS",
    "TASKS",
    "EditResult",
    "SensitivityReport",
    "edit_fact",
    "knowledge_sensitivity",
    "total_variation",
]
