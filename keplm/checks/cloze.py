"""Cloze knowledge checks for TRELM: facts whose object is a real word, stated in a corpus for some subjects and held
only by the KG (and its KG embeddings) for the others.

Subjects have invented names (:func:`keplm.checks.synthetic.invented_words`), so the text cannot tell their facts.
Each subject has one fact per relation of the task; a relation's objects are common uncased words that are one word
piece in BERT's uncased vocabulary (colours, cities, instruments, ...), so LAMA-style probing can score them
(:mod:`keplm.data.lama`). Subjects come in three groups:

- ``train``: their facts are stated in the pre-training corpus (:meth:`ClozeTask.corpus`, KALA annotation JSON that
  ``run_pretraining.py --corpus annotations:<file>`` reads: the subject and the object are mentions and the fact a
  triplet, so TRELM decodes the object against negatives (CKA, eq. 2) and injects the subject's KG embedding, 3.1);
- ``unseen``: their facts are in the KG only (:meth:`ClozeTask.kg`, so in the vectors ``keplm train-kge`` trains
  on it), never in the corpus;
- ``added``: their facts are in no KG during training, only in the updated KG (:meth:`ClozeTask.kg_updated`). A
  trained model reads them after ``keplm train-kge --keep_vectors_from`` fits their vectors in the space of the
  training vectors (the others kept) and ``TrelmProcessor.update_knowledge`` gives them entity rows. They are drawn
  after everything else, from their own random stream, so a seed's other groups are the same with or without them,
  and they have no noise facts.

The cloze queries (:meth:`ClozeTask.queries`) are LAMA-style facts (``sub_label``, ``obj_label``, ``templates``
with ``[X]`` and ``[Y]``) with a template that no corpus sentence uses: ``test_seen`` for training subjects,
``test_unseen`` / ``test_added`` for the others. Relations, objects, corpus templates, the query template and the
names are drawn per seed; ``noise_facts`` adds KG-only facts between subjects (a noise relation), so the vectors
hold more than the queried facts.

Scoring: :func:`cloze_accuracy` (P@1 among the task's object words at the mask; a TRELM model reads the subject's
KG embedding at its mention, a plain masked LM the text only), :func:`follow_rate` (the subject's injected vector
replaced by another subject's: how often the prediction moves to that subject's object) and
:func:`kge_neighbour_accuracy` (how much of a fact the KG vectors themselves hold). TRELM's entity vocabulary is
built from the training mentions, so an unseen subject has no row and is never injected;
:func:`with_entity_rows` appends rows for KG entities with a vector (TRELM has no trained per-entity weight).
"""

from __future__ import annotations

import copy
import json
import os
import random
import re
from dataclasses import dataclass

import numpy as np
import torch

from keplm.data.collator import KeplmDataCollator
from keplm.data.lama import build_queries, common_vocab_ids, predict_top_k
from keplm.knowledge.graph import KnowledgeGraph
from keplm.modeling.modeling_trelm import TrelmForMaskedLM

from .synthetic import TaskEntity, invented_words, read_task_json, write_jsonl, write_jsonl_kg, write_task_json

CLOZE_GROUPS = ("train", "unseen", "added")
#: the groups of the KG of training time and of the updated KG
_KG_GROUPS = ("object", "train", "unseen")
_KG_UPDATED_GROUPS = ("object", *CLOZE_GROUPS)
NOISE_RELATION = "R_noise"

#: relation id -> (KG name, objects, templates). Every object is one word piece of BERT's uncased vocabulary (and
#: so of MiniLM's, checked in the tests when it is installed); every template has [X] (subject) and [Y] (object).
CLOZE_RELATIONS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "R_colour": (
        "favourite colour",
        tuple("red blue green yellow black white brown pink".split()),
        (
            "[X] likes the colour [Y] .",
            "The favourite colour of [X] is [Y] .",
            "[X] always wears [Y] clothes .",
            "[X] painted the door [Y] .",
            "Everything [X] owns is [Y] .",
        ),
    ),
    "R_city": (
        "lives in",
        tuple("paris london berlin tokyo rome madrid moscow chicago".split()),
        (
            "[X] lives in [Y] .",
            "[X] has a flat in [Y] .",
            "The home of [X] is in [Y] .",
            "[X] moved to [Y] last year .",
            "Most days [X] is in [Y] .",
        ),
    ),
    "R_instrument": (
        "plays the",
        tuple("piano guitar violin drums flute trumpet harp cello".split()),
        (
            "[X] plays the [Y] .",
            "[X] practises the [Y] every day .",
            "The instrument of [X] is the [Y] .",
            "[X] bought a new [Y] .",
            "[X] is learning the [Y] .",
        ),
    ),
    "R_pet": (
        "has a pet",
        tuple("dog cat horse rabbit fox wolf bear sheep".split()),
        (
            "[X] has a pet [Y] .",
            "The pet of [X] is a [Y] .",
            "[X] feeds the [Y] every morning .",
            "[X] walks with a [Y] .",
            "At home [X] keeps a [Y] .",
        ),
    ),
    "R_language": (
        "speaks",
        tuple("french german spanish english italian russian japanese dutch".split()),
        (
            "[X] speaks [Y] .",
            "[X] writes letters in [Y] .",
            "The language of [X] is [Y] .",
            "[X] grew up speaking [Y] .",
            "[X] answered in [Y] .",
        ),
    ),
    "R_food": (
        "eats",
        tuple("bread rice soup cheese fish meat apples eggs".split()),
        (
            "[X] eats [Y] .",
            "The favourite food of [X] is [Y] .",
            "[X] cooked [Y] for dinner .",
            "[X] always orders [Y] .",
            "[X] bought some [Y] .",
        ),
    ),
}


def fill(template: str, subject: str, obj: str) -> tuple[str, tuple[int, int], tuple[int, int]]:
    """``template`` with ``[X]`` -> ``subject`` and ``[Y]`` -> ``obj``, and the character spans of both."""
    if template.count("[X]") != 1 or template.count("[Y]") != 1:
        raise ValueError(f"cloze template {template!r} needs exactly one [X] and one [Y]")
    x, y = template.index("[X]"), template.index("[Y]")
    start_x = x + (len(obj) - 3 if y < x else 0)  # the later placeholder moves by the earlier one's change in length
    start_y = y + (len(subject) - 3 if x < y else 0)
    text = re.sub(r"\[[XY]\]", lambda found: subject if found[0] == "[X]" else obj, template)
    return text, (start_x, start_x + len(subject)), (start_y, start_y + len(obj))


@dataclass
class ClozeTask:
    """One cloze task: ``entities`` (subjects of group train / unseen, objects of group ``object`` whose name is the
    word), ``facts`` (every KG triple, noise included), the relations' ``corpus_templates`` and held-out
    ``query_templates``. ``entities``, ``facts`` and ``relation_names`` are laid out as
    :class:`~keplm.checks.synthetic.KnowledgeTask`'s, so :func:`~keplm.checks.synthetic.write_jsonl_kg` writes the
    KG."""

    entities: list[TaskEntity]
    facts: list[tuple[str, str, str]]
    relation_names: dict[str, str]
    corpus_templates: dict[str, list[str]]
    query_templates: dict[str, str]
    seed: int
    sentences_per_fact: int = 3

    def group(self, name: str) -> list[TaskEntity]:
        return [e for e in self.entities if e.group == name]

    @property
    def relations(self) -> list[str]:
        """The queried relations (the noise relation left out)."""
        return [r for r in self.relation_names if r != NOISE_RELATION]

    @property
    def candidates(self) -> list[str]:
        """Every object word of the task: what a cloze prediction is chosen among."""
        return [e.name for e in self.group("object")]

    @property
    def kg(self) -> KnowledgeGraph:
        """The KG of training time: every fact of the training and unseen subjects (the unseen subjects' only
        here), none of the added subjects'."""
        return self._kg(_KG_GROUPS)

    @property
    def kg_updated(self) -> KnowledgeGraph:
        """The KG after the update: the added subjects and their facts too."""
        return self._kg(_KG_UPDATED_GROUPS)

    def _kg(self, groups) -> KnowledgeGraph:
        keep = {e.id: e.name for e in self.entities if e.group in groups}
        facts = [f for f in self.facts if f[0] in keep and f[2] in keep]
        relations = {r: name for r, name in self.relation_names.items() if any(f[1] == r for f in facts)}
        return KnowledgeGraph.from_triples(facts, entity_names=keep, relation_names=relations)

    def _facts_of(self, group: str) -> list[tuple[TaskEntity, str, TaskEntity]]:
        by_id = {e.id: e for e in self.entities}
        members = {e.id for e in self.group(group)}
        return [(by_id[h], r, by_id[t]) for h, r, t in self.facts if h in members and r != NOISE_RELATION]

    # ------------------------------------------------------------------ renderers
    def corpus(self) -> dict[str, dict]:
        """The pre-training corpus as KALA annotation JSON keyed by example id: ``sentences_per_fact`` sentences per
        fact of each training subject (distinct corpus templates), each ``{"text", "entities": [subject, object
        mentions], "triplets": [the fact]}``."""
        rng = random.Random(self.seed + 1)
        examples = {}
        for subject, relation, obj in self._facts_of("train"):
            for template in rng.sample(self.corpus_templates[relation], self.sentences_per_fact):
                text, x, y = fill(template, subject.name, obj.name)
                examples[f"cloze-{len(examples)}"] = {
                    "text": text,
                    "entities": [
                        {"text": e.name, "start": start, "end": end, "id": e.id}
                        for e, (start, end) in ((subject, x), (obj, y))
                    ],
                    "triplets": [{"h": subject.id, "r": relation, "t": obj.id}],
                }
        keys = list(examples)
        rng.shuffle(keys)
        return {key: examples[key] for key in keys}

    def queries(self, group: str) -> list[dict]:
        """LAMA-style facts of ``group``'s subjects (``keplm.data.lama`` reads them), with the relation's held-out
        template: ``relation``, ``sub_label``, ``obj_label``, ``sub_uri``, ``obj_uri``, ``uuid``, ``templates``,
        ``evidences`` (none)."""
        if group not in CLOZE_GROUPS:
            raise ValueError(f"group must be one of {CLOZE_GROUPS}, got {group!r}")
        return [
            {
                "relation": relation,
                "sub_label": subject.name,
                "obj_label": obj.name,
                "sub_uri": subject.id,
                "obj_uri": obj.id,
                "uuid": f"{group}-{i}",
                "templates": [self.query_templates[relation]],
                "evidences": [],
            }
            for i, (subject, relation, obj) in enumerate(self._facts_of(group))
        ]

    # ------------------------------------------------------------------ files
    def write(self, directory: str | os.PathLike) -> dict[str, str]:
        """Write ``kg.jsonl`` (``load_jsonl_kg``'s format: the KG of training time), ``kg_updated.jsonl`` (with the
        added subjects), ``corpus.json`` (the annotation corpus), ``cloze/test_<group>.jsonl`` (the queries) and
        ``cloze_task.json``; returns the paths by name."""
        os.makedirs(os.path.join(directory, "cloze"), exist_ok=True)
        files = {"kg": "kg.jsonl", "kg_updated": "kg_updated.jsonl", "corpus": "corpus.json", "task": "cloze_task.json"}
        files.update({f"cloze/test_{group}": f"cloze/test_{group}.jsonl" for group in CLOZE_GROUPS})
        paths = {name: os.path.join(directory, file) for name, file in files.items()}
        write_jsonl_kg(paths["kg"], self, _KG_GROUPS)
        write_jsonl_kg(paths["kg_updated"], self, _KG_UPDATED_GROUPS)
        with open(paths["corpus"], "w", encoding="utf-8") as f:
            json.dump(self.corpus(), f, indent=0)
        for group in CLOZE_GROUPS:
            write_jsonl(paths[f"cloze/test_{group}"], self.queries(group))
        write_task_json(self, paths["task"])
        return paths


def load_cloze_task(directory: str | os.PathLike) -> ClozeTask:
    """The task :meth:`ClozeTask.write` wrote to ``directory`` (its ``cloze_task.json``)."""
    return read_task_json(ClozeTask, os.path.join(directory, "cloze_task.json"))


def make_cloze_task(
    num_relations: int = 2,
    objects_per_relation: int = 4,
    train_subjects: int = 120,
    unseen_subjects: int = 60,
    sentences_per_fact: int = 3,
    noise_facts: int = 0,
    seed: int = 0,
    added_subjects: int = 60,
) -> ClozeTask:
    """A cloze task (see the module docstring): ``num_relations`` relations of :data:`CLOZE_RELATIONS`, each with
    ``objects_per_relation`` objects, and one fact per relation for every subject; objects are dealt evenly within
    each group (chance and the majority baseline are both 1 / ``objects_per_relation``). Each relation keeps one of
    its templates for the queries and states the corpus facts with ``sentences_per_fact`` of the others;
    ``noise_facts``: KG-only facts per training or unseen subject to random other subjects; ``added_subjects``:
    subjects of the updated KG only (drawn last, from their own random stream)."""
    pool = len(next(iter(CLOZE_RELATIONS.values()))[2])
    if not 1 <= num_relations <= len(CLOZE_RELATIONS):
        raise ValueError(f"num_relations must lie in [1, {len(CLOZE_RELATIONS)}], got {num_relations}")
    if not 2 <= objects_per_relation <= min(len(o) for _, o, _ in CLOZE_RELATIONS.values()):
        raise ValueError(f"objects_per_relation must lie in [2, 8], got {objects_per_relation}")
    if not 1 <= sentences_per_fact < pool:
        raise ValueError(
            f"sentences_per_fact must lie in [1, {pool - 1}] (one template is kept for the queries), "
            f"got {sentences_per_fact}"
        )
    if train_subjects < objects_per_relation or unseen_subjects < 1 or noise_facts < 0 or added_subjects < 0:
        raise ValueError(
            "train_subjects must be >= objects_per_relation, unseen_subjects >= 1, noise_facts >= 0, "
            "added_subjects >= 0"
        )
    rng = random.Random(seed)
    relations = rng.sample(sorted(CLOZE_RELATIONS), num_relations)
    taken = {word for _, objects, _ in CLOZE_RELATIONS.values() for word in objects}
    objects = {
        relation: [
            TaskEntity(f"O_{word}", word, -1, "object")
            for word in rng.sample(CLOZE_RELATIONS[relation][1], objects_per_relation)
        ]
        for relation in relations
    }
    entities, facts = [o for relation in relations for o in objects[relation]], []

    def deal(group: str, count: int, draw: random.Random) -> None:
        subjects = [
            TaskEntity(f"S{len(entities) + i}", name, 0, group)
            for i, name in enumerate(invented_words(count, draw, taken))
        ]
        entities.extend(subjects)
        for relation in relations:
            dealt = [objects[relation][i % objects_per_relation] for i in range(count)]
            draw.shuffle(dealt)
            facts.extend((s.id, relation, o.id) for s, o in zip(subjects, dealt))

    deal("train", train_subjects, rng)
    deal("unseen", unseen_subjects, rng)
    relation_names = {r: CLOZE_RELATIONS[r][0] for r in relations}
    if noise_facts:
        subject_ids = [e.id for e in entities if e.group in ("train", "unseen")]
        relation_names[NOISE_RELATION] = "knows"
        for subject in subject_ids:
            others = rng.sample([s for s in subject_ids if s != subject], noise_facts)
            facts.extend((subject, NOISE_RELATION, other) for other in others)
    corpus_templates, query_templates = {}, {}
    for relation in relations:
        templates = list(CLOZE_RELATIONS[relation][2])
        rng.shuffle(templates)
        query_templates[relation] = templates[0]
        corpus_templates[relation] = templates[1:]
    if added_subjects:
        deal("added", added_subjects, random.Random(f"cloze-added-{seed}"))
    return ClozeTask(entities, facts, relation_names, corpus_templates, query_templates, seed, sentences_per_fact)


# ---------------------------------------------------------------------------------------------- scoring
def reads_knowledge(model) -> bool:
    """Whether ``model`` takes TRELM's knowledge inputs (a ``TrelmForMaskedLM`` with injection or the memory bank);
    a plain masked LM, or TRELM pre-trained as ``--system mlm``, reads the text only."""
    return isinstance(model, TrelmForMaskedLM) and bool(getattr(model.config, "uses_knowledge", False))


def with_entity_rows(model, processor, entity_ids) -> tuple:
    """``(model, processor)`` copies whose entity vocabulary also has rows for those of ``entity_ids`` that the KG
    holds but the vocabulary lacks (appended; the old rows keep their index), so they are injected from their KG
    vectors (TRELM 3.1, eq. 7). TRELM's vocabulary is built from the training mentions (``run_pretraining.py``), so
    an entity that only the KG holds has no row and is read as plain text; the injection table is a frozen copy of
    the KG vectors and no trained weight is per entity, so a new row needs nothing but its vector (the new rows
    have no memory-bank entry). Returns the inputs themselves when nothing is missing."""
    assets = processor.knowledge_assets
    kg = assets.kg
    if kg is None or kg.entity_vectors is None:
        raise ValueError(
            "with_entity_rows: the processor's KG has no entity vectors (train them with `keplm train-kge`)"
        )
    if not reads_knowledge(model):
        raise ValueError(f"with_entity_rows: {type(model).__name__} reads no TRELM knowledge inputs")
    extended = assets.with_entities(entity_ids)
    if extended is assets:
        return model, processor
    model = copy.deepcopy(model)
    model.extend_entity_vocabulary(extended)
    processor = copy.copy(processor)
    processor.knowledge_assets = extended
    return model, processor


def _candidate_ids(tokenizer, candidates) -> list[int]:
    ids, dropped = common_vocab_ids(tokenizer, candidates)
    if dropped or not ids:
        raise ValueError(
            f"{dropped} of the {len(candidates)} candidate objects are not one token of "
            f"{type(tokenizer).__name__}'s vocabulary: cloze P@1 scores single-token objects"
        )
    return ids


@torch.no_grad()
def cloze_predictions(
    model,
    processor,
    rows: list[dict],
    candidates,
    subjects: list[str] | None = None,
    batch_size: int = 64,
    max_length: int = 64,
) -> list[str | None]:
    """The candidate word predicted at the mask of each row (a LAMA-style fact with one template; None where
    ``keplm.data.lama.build_queries`` skipped it). A model that :func:`reads_knowledge` gets the subject as a
    mention of ``subjects[i]`` (default: the row's ``sub_uri``) through the TRELM processor (``entity_ids``,
    ``mention_token_map``, ``inject_mask``: the subject injected when it has an entity row and a KG vector);
    another model gets the text only (``keplm.data.lama.predict_top_k``). ``processor``: a TRELM processor, or a
    tokenizer for a text-only model."""
    tokenizer = getattr(processor, "tokenizer", processor)
    if subjects is not None and len(subjects) != len(rows):
        raise ValueError(f"{len(subjects)} subjects for {len(rows)} rows")
    if any(len(row.get("templates", ())) != 1 for row in rows):
        raise ValueError("every cloze row needs exactly one template (ClozeTask.queries writes one)")
    vocab = _candidate_ids(tokenizer, candidates)
    queries, _ = build_queries(rows, tokenizer, vocab, max_length=max_length)
    model.eval()
    if not reads_knowledge(model):
        top = predict_top_k(model, tokenizer, queries, 1, batch_size, vocab, progress=False)
    else:
        subjects = subjects if subjects is not None else [row["sub_uri"] for row in rows]
        texts, annotations = [], []
        for query in queries:
            row = rows[query["fact"]]
            text, (start, end), _ = fill(query["template"], row["sub_label"], tokenizer.mask_token)
            texts.append(text)
            mention = {"text": row["sub_label"], "start": start, "end": end, "id": subjects[query["fact"]]}
            annotations.append({"entities": [mention], "triplets": []})
        features = processor.prepare_pretraining_features(
            {"text": texts, "knowledge": annotations}, max_length=max_length, knowledge_targets=False
        )
        inputs = ("input_ids", "attention_mask", "token_type_ids", "entity_ids", "mention_token_map", "inject_mask")
        examples = [{k: features[k][i] for k in inputs if k in features} for i in range(len(queries))]
        collator = KeplmDataCollator.from_processor(processor, model)
        device = next(model.parameters()).device
        top = []
        for start in range(0, len(examples), batch_size):
            batch = {k: v.to(device) for k, v in collator(examples[start : start + batch_size]).items()}
            hidden = model.trelm(**batch).last_hidden_state
            at, col = (batch["input_ids"] == tokenizer.mask_token_id).nonzero(as_tuple=True)
            best = model.lm_head(hidden[at, col])[:, vocab].argmax(-1)  # among the candidates (sorted ids)
            top.extend([[vocab[i]] for i in best.tolist()])
    predicted: list[str | None] = [None] * len(rows)
    for query, ids in zip(queries, top):
        predicted[query["fact"]] = tokenizer.convert_ids_to_tokens(ids[0])
    return predicted


def cloze_accuracy(model, processor, rows: list[dict], candidates, batch_size: int = 64) -> float:
    """P@1 among ``candidates`` (the task's object words) at the mask: share of rows predicted as their
    ``obj_label`` (see :func:`cloze_predictions` for what each kind of model reads)."""
    predicted = cloze_predictions(model, processor, rows, candidates, batch_size=batch_size)
    return sum(p == row["obj_label"] for p, row in zip(predicted, rows)) / max(1, len(rows))


def swap_donors(rows: list[dict], seed: int = 0) -> list[dict | None]:
    """For each row, another row of the same relation whose subject differs and whose object differs (seeded draw;
    None when there is none): the subject whose KG vector :func:`follow_rate` injects instead."""
    rng = random.Random(seed)
    donors = []
    for row in rows:
        pool = [
            other
            for other in rows
            if other["relation"] == row["relation"]
            and other["obj_label"] != row["obj_label"]
            and other["sub_uri"] != row["sub_uri"]
        ]
        donors.append(rng.choice(pool) if pool else None)
    return donors


def follow_rate(model, processor, rows: list[dict], candidates, seed: int = 0, batch_size: int = 64) -> float:
    """Counterfactual injected vector: each row's subject mention is read as another subject (its KG vector
    injected, and its memory-bank entry, if any; :func:`swap_donors`) whose object differs; the share of rows whose
    prediction becomes that subject's object. A model that reads no knowledge gets the same text, so its rate is
    the share of rows whose prediction happens to be the donor's object (the level of no following)."""
    donors = swap_donors(rows, seed)
    kept = [i for i, donor in enumerate(donors) if donor is not None]
    if not kept:
        raise ValueError("follow_rate: no row has a donor (a subject of the same relation with another object)")
    picked = [rows[i] for i in kept]
    predicted = cloze_predictions(
        model, processor, picked, candidates, subjects=[donors[i]["sub_uri"] for i in kept], batch_size=batch_size
    )
    return sum(p == donors[i]["obj_label"] for p, i in zip(predicted, kept)) / len(kept)


def injected_share(processor, rows: list[dict]) -> float:
    """Share of rows whose subject the processor would inject: it has an entity row and a KG vector."""
    assets = processor.knowledge_assets
    kg = assets.kg
    if kg is None or kg.entity_vectors is None:
        return 0.0
    return sum(assets.entity_row(row["sub_uri"]) > 0 and kg.has_entity(row["sub_uri"]) for row in rows) / max(
        1, len(rows)
    )


def kge_neighbour_accuracy(kg: KnowledgeGraph, task: ClozeTask, group: str = "unseen") -> float:
    """How much of ``group``'s facts the KG vectors hold where a model could read it: each subject's object,
    per relation, taken from its nearest training subject by cosine of the vectors (a training subject's own
    fact excluded from its neighbours). ``kg``: the KG with ``entity_vectors`` (``keplm train-kge``)."""
    if kg.entity_vectors is None:
        raise ValueError("kge_neighbour_accuracy: the KG has no entity vectors")
    vectors = np.asarray(kg.entity_vectors, dtype=np.float64)
    vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    train = [e.id for e in task.group("train")]
    queried = [e.id for e in task.group(group)]
    similarity = vectors[[kg.entity_index(e) for e in queried]] @ vectors[[kg.entity_index(e) for e in train]].T
    if group == "train":
        np.fill_diagonal(similarity, -np.inf)
    nearest = [train[j] for j in similarity.argmax(1)]
    objects = {(h, r): t for h, r, t in task.facts if r != NOISE_RELATION}
    hits = [objects[(q, r)] == objects[(n, r)] for q, n in zip(queried, nearest) for r in task.relations]
    return sum(hits) / max(1, len(hits))


__all__ = [
    "CLOZE_GROUPS",
    "CLOZE_RELATIONS",
    "ClozeTask",
    "cloze_accuracy",
    "cloze_predictions",
    "fill",
    "follow_rate",
    "injected_share",
    "kge_neighbour_accuracy",
    "load_cloze_task",
    "make_cloze_task",
    "reads_knowledge",
    "swap_donors",
    "with_entity_rows",
]
