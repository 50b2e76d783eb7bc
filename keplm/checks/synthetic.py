"""Synthetic knowledge-dependence tasks: labels that are a function of KG facts only.

Every entity has an invented, type-free name and appears in type-neutral sentences, so the text alone cannot
tell its type. The type is held by the knowledge graph in one of two ways (``kind``):

- ``"neighbour"``: each type has its own anchor entities, and an entity is linked to an anchor of its type
  through one relation shared by all types (KALA's restenosis example: the neighbour carries the meaning);
- ``"relation"``: every entity is linked to an anchor from one shared pool, through a relation of its own type
  (the relation carries the meaning: "X, instance of, city");
- ``"two_hop"``: every entity is linked to a bridge entity of its own, never mentioned anywhere, which is linked to
  an anchor of the entity's type: the meaning is two hops away, so it reaches the entity only when each context's KG
  holds the bridge's facts too (``run_ner.py --link_hops 2``) and the relational retrieval has two layers.

``noise_facts`` adds facts through a noise relation to anchors picked at random, so the informative fact has
to be found among others. Anchors are mentioned in training (they get entity-memory rows); entities come in
three groups: ``train`` (mentioned in training), ``unseen`` (in the KG during training, never mentioned) and
``added`` (in no KG during training: their facts are in :attr:`KnowledgeTask.kg_full` only, for knowledge
updates after training).

One task renders in each method's shape: NER (:meth:`KnowledgeTask.ner_splits`), extractive QA
(:meth:`~KnowledgeTask.qa_splits`), sentence classification (:meth:`~KnowledgeTask.classification_splits`);
:meth:`~KnowledgeTask.write` writes them as files the run scripts read.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import asdict, dataclass, field

from keplm.io_utils import read_json
from keplm.knowledge.graph import KnowledgeGraph

KINDS = ("neighbour", "relation", "two_hop")
GROUPS = ("train", "unseen", "added")
#: the groups of the KG of training time (``kg_train``) and of the KG after the update (``kg_full``)
KG_TRAIN_GROUPS = ("anchor", "train", "unseen")
KG_FULL_GROUPS = (*KG_TRAIN_GROUPS, "added")
#: group of a ``two_hop`` entity's bridge: its entity's group and this suffix
BRIDGE_SUFFIX = "_bridge"
#: labels of the types (NER tags B-/I-<label>) and of the anchors
TYPE_LABELS = tuple("PER ORG MISC EVT PRD ART".split())
ANCHOR_LABEL = "LOC"

_ONSETS = tuple("b d f g k l m n p r s t v z br dr gl kr pl st tr vl zh".split())
_VOWELS = tuple("a e i o u ae ou ei".split())
_CODAS = ("", "", "n", "r", "l", "s", "m", "th", "x")

#: type-neutral sentence templates; ``{e}`` is the entity. Each task draws its own subset.
NER_TEMPLATES = (
    "{e} was mentioned in the report .",
    "We heard about {e} yesterday .",
    "The note said that {e} is back .",
    "Nobody expected {e} to be there .",
    "{e} came up again in the discussion .",
    "Later that week , {e} was in the news .",
    "Everyone was talking about {e} .",
    "The letter was about {e} .",
    "There was a long story on {e} today .",
    "Some people asked about {e} .",
)
ANCHOR_TEMPLATES = ("The list also named {e} .", "{e} was on the map .", "They travelled through {e} .")
QA_TEMPLATES = (
    "{a} , {b} and {c} were named in the report .",
    "The report listed {a} , {b} and {c} .",
    "Yesterday {a} , {b} and {c} were in the news .",
    "We read about {a} , {b} and {c} .",
)


def invented_words(count: int, rng: random.Random, taken: set[str], syllables: tuple[int, int] = (2, 3)) -> list[str]:
    """``count`` new capitalised pseudo-words (not in ``taken``, which they are added to)."""
    words = []
    while len(words) < count:
        word = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(rng.randint(*syllables)))
        word = (word + rng.choice(_CODAS)).capitalize()
        if word.lower() not in taken:
            taken.add(word.lower())
            words.append(word)
    return words


@dataclass
class TaskEntity:
    id: str
    name: str
    type: int  # index into the task's labels; -1 for an anchor
    group: str  # train / unseen / added / anchor


@dataclass
class KnowledgeTask:
    """One synthetic task: its entities, the KG seen in training and the KG after the update, and renderers."""

    kind: str
    labels: list[str]
    entities: list[TaskEntity]
    facts: list[tuple[str, str, str]]  # every fact, the added entities' included
    relation_names: dict[str, str]
    ner_templates: list[str]
    seed: int
    sentences_per_entity: int = 3
    qa_contexts_per_entity: int = 8
    informative: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # entity id -> its typing fact

    def __post_init__(self):
        self.informative = {k: tuple(v) for k, v in self.informative.items()}  # read back from JSON: lists

    # ------------------------------------------------------------------ knowledge graphs
    def members(self, groups) -> set[str]:
        """Ids of the entities of ``groups``, with the bridges of those groups (``two_hop`` tasks)."""
        return group_members(self.entities, groups)

    def _kg(self, groups) -> KnowledgeGraph:
        keep = self.members(groups)
        return KnowledgeGraph.from_triples(
            [f for f in self.facts if f[0] in keep and f[2] in keep],
            entity_names={e.id: e.name for e in self.entities if e.id in keep},
            relation_names=self.relation_names,
        )

    @property
    def kg_train(self) -> KnowledgeGraph:
        """The KG of training time: anchors, training and unseen entities, without the added entities."""
        return self._kg(KG_TRAIN_GROUPS)

    @property
    def kg_full(self) -> KnowledgeGraph:
        """The KG after the update: the added entities and their facts too."""
        return self._kg(KG_FULL_GROUPS)

    def group(self, name: str) -> list[TaskEntity]:
        return [e for e in self.entities if e.group == name]

    # ------------------------------------------------------------------ NER
    def _add_ner_row(self, rows: list[dict], entity: TaskEntity, template: str) -> None:
        """Append ``template`` about ``entity`` to ``rows``, tagged and numbered."""
        before, _, after = template.partition("{e}")
        tokens = [*before.split(), entity.name, *after.split()]
        position = len(before.split())
        label = ANCHOR_LABEL if entity.type < 0 else self.labels[entity.type]
        tags = ["O"] * len(tokens)
        tags[position] = f"B-{label}"
        rows.append(
            {"id": str(len(rows)), "tokens": tokens, "ner_tags": tags, "entity": entity.id, "entity_word": position}
        )

    def ner_splits(self) -> dict[str, list[dict]]:
        """``train`` (training entities in ``sentences_per_entity`` sentences each, anchors too), ``validation`` and
        ``test_seen`` (training entities in other sentences), ``test_unseen`` and ``test_added`` (one sentence
        each). Rows: ``id``, ``tokens``, ``ner_tags`` (strings), ``entity`` (its id), ``entity_word``."""
        rng = random.Random(self.seed + 1)
        splits: dict[str, list[dict]] = {
            name: [] for name in ("train", "validation", "test_seen", "test_unseen", "test_added")
        }
        templates = self.ner_templates
        for entity in self.group("train"):
            chosen = rng.sample(templates, min(len(templates), self.sentences_per_entity + 1))
            for template in chosen[:-1]:
                self._add_ner_row(splits["train"], entity, template)
            self._add_ner_row(splits["validation" if rng.random() < 0.3 else "test_seen"], entity, chosen[-1])
        for anchor in self.group("anchor"):
            for template in ANCHOR_TEMPLATES[: self.sentences_per_entity]:
                self._add_ner_row(splits["train"], anchor, template)
        for group in ("unseen", "added"):
            for entity in self.group(group):
                self._add_ner_row(splits[f"test_{group}"], entity, rng.choice(templates))
        rng.shuffle(splits["train"])
        return splits

    # ------------------------------------------------------------------ QA
    def qa_splits(self, contexts_per_entity: int | None = None) -> dict[str, list[dict]]:
        """SQuAD-format rows: a context names one entity of each of three types and an anchor, the question asks
        for the entity of one type (``"Which one is a <label> ?"``), the answer is that entity's name. Splits as
        :meth:`ner_splits` (all entities of a context from one group); each training entity is in
        ``contexts_per_entity`` training contexts (default: the task's ``qa_contexts_per_entity``)."""
        contexts_per_entity = contexts_per_entity or self.qa_contexts_per_entity
        rng = random.Random(self.seed + 2)
        anchors = self.group("anchor")
        splits: dict[str, list[dict]] = {}
        for split, group, repeats in (
            ("train", "train", contexts_per_entity),
            ("validation", "train", 1),
            ("test_seen", "train", 1),
            ("test_unseen", "unseen", 1),
            ("test_added", "added", 1),
        ):
            by_type = {}
            for entity in self.group(group):
                by_type.setdefault(entity.type, []).append(entity)
            rows = []
            for _ in range(repeats):
                pools = {t: rng.sample(members, len(members)) for t, members in by_type.items()}
                for picked in zip(*(pools[t] for t in sorted(pools)[:3])):
                    picked = list(picked)
                    rng.shuffle(picked)
                    context = rng.choice(QA_TEMPLATES).format(**dict(zip("abc", (e.name for e in picked))))
                    context += f" {rng.choice(anchors).name} was also there ."
                    target = rng.choice(picked)
                    rows.append(
                        {
                            "id": f"{split}-{len(rows)}",
                            "title": "synthetic",
                            "context": context,
                            "question": f"Which one is a {self.labels[target.type]} ?",
                            "answers": {"text": [target.name], "answer_start": [context.index(target.name)]},
                            "entity": target.id,
                        }
                    )
            if split in ("validation", "test_seen"):  # the held-out contexts of seen entities: half each
                rows = rows[: len(rows) // 2] if split == "validation" else rows[len(rows) // 2 :]
            splits[split] = rows
        return splits

    # ------------------------------------------------------------------ sentence classification
    def classification_splits(self) -> dict[str, list[dict]]:
        """One sentence per NER row whose entity is typed: ``sentence``, ``label`` (the type's index)."""
        types = {e.id: e.type for e in self.entities}
        return {
            split: [
                {"idx": i, "sentence": " ".join(row["tokens"]), "label": types[row["entity"]], "entity": row["entity"]}
                for i, row in enumerate(r for r in rows if types[r["entity"]] >= 0)
            ]
            for split, rows in self.ner_splits().items()
        }

    # ------------------------------------------------------------------ files
    def write(self, directory: str | os.PathLike) -> dict[str, str]:
        """Write ``kg_train.jsonl``, ``kg_full.jsonl``, ``task.json`` and ``ner/``, ``qa/``, ``classification/``
        (one JSON-lines file per split); returns the paths by name."""
        os.makedirs(directory, exist_ok=True)
        paths = {}
        for name, groups in (("kg_train", KG_TRAIN_GROUPS), ("kg_full", KG_FULL_GROUPS)):
            paths[name] = os.path.join(directory, f"{name}.jsonl")
            write_jsonl_kg(paths[name], self, groups)
        for shape, splits in (
            ("ner", self.ner_splits()),
            ("qa", self.qa_splits()),
            ("classification", self.classification_splits()),
        ):
            os.makedirs(os.path.join(directory, shape), exist_ok=True)
            for split, rows in splits.items():
                path = os.path.join(directory, shape, f"{split}.json" if shape == "qa" else f"{split}.jsonl")
                if shape == "qa":  # SQuAD v1.1's layout, which run_qa.py reads
                    with open(path, "w", encoding="utf-8") as f:
                        json.dump(squad_payload(rows), f)
                else:
                    write_jsonl(path, rows)
                paths[f"{shape}/{split}"] = path
        paths["task"] = os.path.join(directory, "task.json")
        write_task_json(self, paths["task"])
        return paths


def squad_payload(rows: list[dict]) -> dict:
    """QA rows as a SQuAD v1.1 file: one article, one paragraph per row."""
    return {
        "version": "1.1",
        "data": [
            {
                "title": "synthetic",
                "paragraphs": [
                    {
                        "context": row["context"],
                        "qas": [
                            {
                                "id": row["id"],
                                "question": row["question"],
                                "answers": [
                                    {"text": t, "answer_start": s}
                                    for t, s in zip(row["answers"]["text"], row["answers"]["answer_start"])
                                ],
                            }
                        ],
                    }
                    for row in rows
                ],
            }
        ],
    }


def write_task_json(task, path: str) -> None:
    """``task`` (a :class:`KnowledgeTask` or :class:`~keplm.checks.cloze.ClozeTask`) as JSON, field by field."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(asdict(task), f, indent=1)


def read_task_json(cls, path: str):
    """The task of class ``cls`` that :func:`write_task_json` wrote to ``path``."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} not found: write the task with {cls.__name__}.write first")
    data = read_json(path)
    data["entities"] = [TaskEntity(**e) for e in data["entities"]]
    data["facts"] = [tuple(f) for f in data["facts"]]
    return cls(**data)


def load_knowledge_task(directory: str | os.PathLike) -> KnowledgeTask:
    """The task :meth:`KnowledgeTask.write` wrote to ``directory`` (its ``task.json``)."""
    return read_task_json(KnowledgeTask, os.path.join(directory, "task.json"))


def group_members(entities, groups) -> set[str]:
    """Ids of the ``entities`` in ``groups``, with the bridges of those groups (``two_hop`` tasks)."""
    return {e.id for e in entities if e.group.removesuffix(BRIDGE_SUFFIX) in groups}


def write_jsonl(path: str, rows) -> None:
    """``rows`` (dicts) as a JSON-lines file."""
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)


def write_jsonl_kg(path: str, task: KnowledgeTask, groups) -> None:
    """The task's KG restricted to ``groups`` in ``load_jsonl_kg``'s format (``jsonl:<path>``)."""
    keep = group_members(task.entities, groups)
    write_jsonl(
        path,
        [
            *({"type": "relation", "id": rid, "name": name} for rid, name in task.relation_names.items()),
            *({"type": "entity", "id": e.id, "name": e.name} for e in task.entities if e.id in keep),
            *({"h": h, "r": r, "t": t} for h, r, t in task.facts if h in keep and t in keep),
        ],
    )


def make_knowledge_task(
    kind: str = "relation",
    num_types: int = 3,
    train_per_type: int = 60,
    unseen_per_type: int = 30,
    added_per_type: int = 30,
    anchors_per_type: int = 4,
    noise_facts: int = 0,
    sentences_per_entity: int = 3,
    num_templates: int = 6,
    qa_contexts_per_entity: int = 8,
    seed: int = 0,
) -> KnowledgeTask:
    """A synthetic task whose entity types live in the KG only (see the module docstring).

    ``anchors_per_type``: anchors of each type (``neighbour``) or, times ``num_types``, the shared pool
    (``relation``); ``noise_facts``: facts per entity through the noise relation to random anchors;
    ``num_templates``: how many of :data:`NER_TEMPLATES` the task draws (its own seeded subset).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if not 2 <= num_types <= len(TYPE_LABELS):
        raise ValueError(f"num_types must lie in [2, {len(TYPE_LABELS)}], got {num_types}")
    if min(train_per_type, anchors_per_type, sentences_per_entity) < 1 or min(unseen_per_type, added_per_type) < 0:
        raise ValueError(
            "train_per_type, anchors_per_type and sentences_per_entity must be >= 1; unseen_per_type "
            "and added_per_type >= 0"
        )
    if not 2 <= num_templates <= len(NER_TEMPLATES):
        raise ValueError(f"num_templates must lie in [2, {len(NER_TEMPLATES)}], got {num_templates}")
    rng = random.Random(seed)
    taken: set[str] = set()
    labels = list(TYPE_LABELS[:num_types])
    anchors = [
        TaskEntity(f"A{i}", name, -1, "anchor")
        for i, name in enumerate(invented_words(anchors_per_type * num_types, rng, taken))
    ]
    entities: list[TaskEntity] = list(anchors)
    for group, count in zip(GROUPS, (train_per_type, unseen_per_type, added_per_type)):
        for type_index in range(num_types):
            for name in invented_words(count, rng, taken):
                entities.append(TaskEntity(f"E{len(entities)}", name, type_index, group))
    relation_words = invented_words(num_types + 2, rng, taken, syllables=(1, 2))
    if kind == "neighbour":
        relation_names = {"R_link": f"{relation_words[0].lower()} of"}
    elif kind == "two_hop":
        relation_names = {"R_via": f"{relation_words[1].lower()} with", "R_link": f"{relation_words[0].lower()} of"}
    else:
        relation_names = {f"R_{label}": f"{relation_words[i].lower()} of" for i, label in enumerate(labels)}
    relation_names["R_noise"] = f"{relation_words[-1].lower()} near"
    facts, informative, bridges = [], {}, []
    for entity in entities:
        if entity.type < 0:
            continue
        if kind == "relation":
            fact = (entity.id, f"R_{labels[entity.type]}", rng.choice(anchors).id)
        else:  # linked to an anchor of its type: the entity itself, or (two_hop) its own bridge, which it links to
            linked = entity
            if kind == "two_hop":
                name = invented_words(1, rng, taken)[0]
                linked = TaskEntity(f"B{len(bridges)}", name, -1, entity.group + BRIDGE_SUFFIX)
                bridges.append(linked)
                facts.append((entity.id, "R_via", linked.id))
            anchor = anchors[entity.type * anchors_per_type + rng.randrange(anchors_per_type)]
            fact = (linked.id, "R_link", anchor.id)
        informative[entity.id] = fact
        facts.append(fact)
        facts.extend((entity.id, "R_noise", rng.choice(anchors).id) for _ in range(noise_facts))
    return KnowledgeTask(
        kind,
        labels,
        entities + bridges,
        facts,
        relation_names,
        rng.sample(NER_TEMPLATES, num_templates),
        seed,
        sentences_per_entity,
        qa_contexts_per_entity,
        informative,
    )


__all__ = [
    "ANCHOR_LABEL",
    "KINDS",
    "KnowledgeTask",
    "TaskEntity",
    "load_knowledge_task",
    "make_knowledge_task",
    "read_task_json",
    "write_jsonl_kg",
    "write_task_json",
]
