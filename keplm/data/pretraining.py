"""TRELM's pre-training corpus: sentences with Wikidata entity annotations, and facts held out of it.

TRELM (section 3, knowledge-guided pre-training; section 4, knowledge probing) pre-trains on text whose entity
mentions are linked to a KG and measures on LAMA how much of the facts it saw it can recall. To tell
generalisation from memorisation a seeded share of the LAMA T-REx probe facts is *held out*: no sentence expressing
one enters the corpus and :func:`kg_without_facts` removes them from the injected KG.

Sources (specs as ``kind:path``, read by :func:`load_pretraining_corpus`):

* ``trex:<LAMA root, TREx folder or P*.jsonl(.gz)>`` - every evidence sentence of the LAMA T-REx probe with its
  ``[MASK]`` restored to ``obj_surface``; subject and object are located as character spans. An evidence with no
  or several ``[MASK]``, no surface, or whose subject cannot be found apart from the object is skipped and
  counted by reason (:data:`~keplm.data.corpus_sources.SKIP_REASONS`).
* ``fewrel:<val_wiki.json(.gz)>`` - FewRel sentences, detokenized (:func:`~keplm.data.corpus_sources.detokenize`)
  with the head/tail token positions turned into character spans; the relation is the P-id key.
* ``task:<ner|qa>:<dataset>[|first=N][|articles=T,V,E]`` - the training text of a downstream task, without
  entity annotations (task-adaptive pre-training, KALA's TAPT baseline): NER ``" ".join(tokens)`` of the train split,
  QA the distinct contexts of the train questions. ``first=N`` keeps the first N train examples, as the run scripts'
  ``--max_train_samples`` does, so the pre-training text is the fine-tuning text; ``articles`` splits one SQuAD file by
  article as ``run_qa.py --split_by_article`` does (the validation and test articles never enter pre-training).
* ``annotations:<file.json or build-kg folder>[|ner:<dataset> or |qa:<dataset>]`` - KALA annotation JSON as
  ``keplm build-kg`` writes it (``<split>.json`` keyed by example id, no text: the text comes from the NER dataset,
  ``" ".join(tokens)`` of the same split, or the QA dataset's ``context`` by question id; a build-kg folder's
  ``report.json`` names the task). Values that carry their own ``"text"`` need no dataset.

Each example is ``{"id", "text", "source", "knowledge", "facts"}``: ``knowledge`` a KALA annotation
(:data:`~keplm.knowledge.annotation.KNOWLEDGE_FEATURE`: Wikidata-id mentions, the facts as triplets), ``facts``
the keys ``(sub_uri, predicate_id, obj_uri)`` the text expresses (as ``{"h", "r", "t"}``; for annotation files
the triplets whose both ends are mentioned). Identical texts of a source are one example: a sentence that is the
evidence of several facts carries them all, so holding one of them out removes the sentence.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import numpy as np

from keplm.knowledge.annotation import KNOWLEDGE_FEATURE

from . import corpus_sources as readers
from .corpus_sources import FactKey
from .lama import write_fact_keys

logger = logging.getLogger(__name__)

SOURCE_KINDS = ("trex", "fewrel", "annotations", "task")
FACT_FEATURE = [{"h": datasets.Value("string"), "r": datasets.Value("string"), "t": datasets.Value("string")}]
CORPUS_FEATURES = datasets.Features(
    {
        "id": datasets.Value("string"),
        "text": datasets.Value("string"),
        "source": datasets.Value("string"),
        "knowledge": KNOWLEDGE_FEATURE,
        "facts": FACT_FEATURE,
    }
)


def parse_source_spec(spec: str) -> tuple[str, str, str | None]:
    """``(kind, path, dataset)`` of a source spec (``dataset``: the ``|...`` part of an ``annotations:`` spec).
    ValueError for an unknown kind, FileNotFoundError for a missing path, both naming the spec."""
    kind, sep, rest = os.fspath(spec).partition(":")
    if not sep or kind not in SOURCE_KINDS:
        raise ValueError(
            f"unknown pre-training source {spec!r}: use kind:path with kind one of {list(SOURCE_KINDS)} "
            "(trex:<LAMA dir>, fewrel:<val_wiki.json.gz>, annotations:<file or dir>[|ner:<dataset>], "
            "task:<ner|qa>:<dataset>[|first=N])"
        )
    path, _, dataset = rest.partition("|") if kind in ("annotations", "task") else (rest, "", "")
    if kind == "task":  # task:<ner|qa>:<dataset>[|options]: the path is the dataset's, a Hub id is allowed
        task, _, path = path.partition(":")
        if task not in ("ner", "qa") or not path:
            raise ValueError(f"pre-training source {spec!r}: use task:ner:<dataset> or task:qa:<dataset>")
        return kind, path, "|".join([task, *([dataset] if dataset else [])])
    if not path or not os.path.exists(path):
        raise FileNotFoundError(f"pre-training source {spec!r}: {path!r} does not exist")
    return kind, path, dataset or None


# --------------------------------------------------------------------------- held-out facts


def sample_held_out(keys: Iterable[FactKey], fraction: float, seed: int = 0) -> set[FactKey]:
    """A seeded ``fraction`` of ``keys`` per relation: ``round(fraction * n)`` of each relation's ``n`` facts,
    at least one and at most ``n - 1`` (every relation keeps seen and held-out facts; a relation with one fact
    keeps it seen). Each relation's draw depends only on its own facts and the seed."""
    if not 0 <= fraction < 1:
        raise ValueError(f"held_out_fraction must be in [0, 1), got {fraction}")
    by_relation: dict[str, list[FactKey]] = {}
    for key in set(map(tuple, keys)):
        by_relation.setdefault(key[1], []).append(key)
    held_out = set()
    for relation, items in by_relation.items():
        if fraction == 0 or len(items) < 2:
            continue
        items.sort()
        random.Random(f"{seed}:{relation}").shuffle(items)
        held_out.update(items[: min(max(1, round(fraction * len(items))), len(items) - 1)])
    return held_out


def kg_without_facts(kg, keys: Iterable[FactKey], drop_vectors: bool = False):
    """A new :class:`~keplm.knowledge.KnowledgeGraph` without the triples whose ``(head, relation, tail)`` ids are
    in ``keys`` (e.g. the held-out facts, so knowledge injection cannot leak them). Entities, names, aliases and
    relations are kept. Entity vectors are kept unless ``drop_vectors``; when triples are removed from a graph with
    vectors a WARNING says that vectors trained on the full graph may still encode them (train them on the new
    graph: ``keplm train-kge``). ``build_report["facts_removed"]`` counts the keys, the triples removed and the keys
    not in the graph."""
    keys = set(map(tuple, keys))
    n, m = kg.num_entities, kg.num_relations
    wanted = {
        (kg.entity_index(h), kg.relation_index(r), kg.entity_index(t))
        for h, r, t in keys
        if kg.has_entity(h) and kg.has_relation(r) and kg.has_entity(t)
    }
    triples = kg.triples
    if n * n * max(m, 1) < 2**63:  # one int64 code per triple: a vectorised membership test
        codes = np.asarray([(h * m + r) * n + t for h, r, t in wanted], dtype=np.int64)
        remove = np.isin((triples[:, 0] * m + triples[:, 1]) * n + triples[:, 2], codes)
    else:
        remove = np.fromiter((tuple(row) in wanted for row in triples.tolist()), dtype=bool, count=len(triples))
    removed = int(remove.sum())
    vectors = None if drop_vectors else kg.entity_vectors
    if vectors is not None and removed:
        logger.warning(
            "kg_without_facts: %d triples removed but the entity vectors are kept: if they were trained "
            "on the full graph they may encode the removed facts (train them on the new graph)",
            removed,
        )
    new = kg.replace(triples=triples[~remove], entity_vectors=vectors)
    counts = {"keys": len(keys), "triples_removed": removed, "keys_not_in_kg": len(keys) - removed}
    new.build_report = {**kg.build_report, "facts_removed": counts}
    logger.info(
        "kg_without_facts: removed %d of %d triples (%d of %d keys are not in the graph)",
        removed,
        kg.num_triples,
        counts["keys_not_in_kg"],
        len(keys),
    )
    return new


# --------------------------------------------------------------------------- the corpus


@dataclass
class PretrainingCorpus:
    """The corpus (``dataset``: :data:`CORPUS_FEATURES` columns), the fact keys whose sentences it holds
    (``seen_keys``: every fact any kept example expresses), the LAMA T-REx probe facts without a sentence in it
    (``held_out_keys``: the seeded sample, plus probe facts that lost every sentence with it, counted apart as
    ``report["held_out"]["without_sentence"]``), the probe facts whose sentences only ``max_examples`` dropped
    (``capped_keys``: not held out, so they stay in the KG and the probe leaves them out; the held-out set, and so
    the KG embeddings trained without it, does not depend on the cap), and the JSON-ready ``report``."""

    dataset: datasets.Dataset
    seen_keys: set[FactKey] = field(default_factory=set)
    held_out_keys: set[FactKey] = field(default_factory=set)
    report: dict = field(default_factory=dict)
    capped_keys: set[FactKey] = field(default_factory=set)

    def save(self, directory: str | os.PathLike, save_dataset: bool = False) -> None:
        """Write ``seen_facts.tsv`` and ``held_out_facts.tsv`` (``keplm.data.lama.write_fact_keys``; the first is
        what ``run_scripts/run_probe.py --seen_fact_keys`` reads), ``corpus_report.json`` and, with
        ``save_dataset``, the dataset (``save_to_disk`` in ``dataset/``)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        write_fact_keys(directory / "seen_facts.tsv", self.seen_keys)
        write_fact_keys(directory / "held_out_facts.tsv", self.held_out_keys)
        (directory / "corpus_report.json").write_text(
            json.dumps(self.report, indent=2, ensure_ascii=False), encoding="utf-8"
        )
        if save_dataset:
            self.dataset.save_to_disk(directory / "dataset")


def _relation_sort_key(relation: str):
    return (0, int(relation[1:])) if relation[1:].isdigit() else (1, relation)


def load_pretraining_corpus(
    sources: Sequence[str],
    held_out_fraction: float = 0.2,
    seed: int = 0,
    max_examples: int | None = None,
    relations: Sequence[str] | None = None,
) -> PretrainingCorpus:
    """Read ``sources`` (see the module docstring), hold out a seeded ``held_out_fraction`` of the LAMA T-REx probe
    facts per relation (:func:`sample_held_out`) and drop every example expressing one (and any example of the same
    text); the probe facts left without a sentence count as held out too (:class:`PretrainingCorpus`), and held-out
    facts among the triplets of annotation files are removed from them. ``max_examples`` keeps a seeded sample of
    that many examples (in corpus order); ``relations`` restricts T-REx and FewRel to those P-ids. Long reads show
    progress bars (off with ``datasets.disable_progress_bars()``) and each source's counts are logged."""
    start_time = time.perf_counter()
    if isinstance(sources, str):
        sources = [sources]
    if not sources:
        raise ValueError("load_pretraining_corpus: no sources given")
    parsed = [(spec, *parse_source_spec(spec)) for spec in sources]  # every spec checked before reading anything
    groups, reports, probe_facts = [], [], []
    for spec, kind, path, dataset in parsed:
        if kind == "trex":
            examples, facts, report = readers.read_trex_examples(path, relations, spec)
            probe_facts.extend(facts)
        elif kind == "fewrel":
            examples, report = readers.read_fewrel_examples(path, relations, spec)
        elif kind == "task":
            examples, report = readers.read_task_examples(path, dataset, spec)
        else:
            examples, report = readers.read_annotation_examples(path, dataset, spec)
        logger.info(
            "%s: read %d, kept %d as %d examples, skipped %s, %d duplicates, %d merged",
            spec,
            report["read"],
            report["kept"],
            len(examples),
            report["skipped"] or "none",
            report["deduplicated"],
            report["merged"],
        )
        if report["skipped"]:
            logger.warning("%s: skipped %s", spec, report["skipped"])
        groups.append(examples)
        reports.append(report)

    probe_keys = {(str(f["sub_uri"]), f["relation"], str(f["obj_uri"])) for f in probe_facts}
    sampled = sample_held_out(probe_keys, held_out_fraction, seed)
    # an example expressing a held-out fact goes, and so does every other example with the same text
    removed_texts = {ex["text"] for examples in groups for ex in examples if not sampled.isdisjoint(ex["facts"])}
    kept, ids = [], set()
    for group, (examples, report) in enumerate(zip(groups, reports)):
        report["held_out"] = report["held_out_triplets_removed"] = 0
        for ex in examples:
            if ex["text"] in removed_texts:
                report["held_out"] += 1
                continue
            example_id = ex["id"] if ex["id"] not in ids else f"{ex['id']}#{group}"  # two sources, same ids
            ids.add(example_id)
            kept.append({**ex, "id": example_id, "group": group})
    if not kept:
        counts = "; ".join(
            f"{r['spec']}: read {r['read']}, kept {r['kept']}, held out {r['held_out']}, skipped "
            f"{r['skipped'] or 'none'}"
            for r in reports
        )
        raise ValueError(f"the pre-training corpus is empty: no source gave an example to train on ({counts})")
    held_out_keys = probe_keys - {f for ex in kept for f in ex["facts"]}  # before the cap: see PretrainingCorpus
    dropped_by_cap = 0
    if max_examples is not None and len(kept) > max_examples:
        chosen = sorted(random.Random(seed).sample(range(len(kept)), max_examples))
        dropped_by_cap, kept = len(kept) - max_examples, [kept[i] for i in chosen]
    seen_keys = {f for ex in kept for f in ex["facts"]}
    capped_keys = probe_keys - held_out_keys - seen_keys
    for ex in kept:  # a held-out fact listed as context knowledge (annotation files' neighbours) is removed too
        triplets = [t for t in ex["triplets"] if t not in held_out_keys]
        reports[ex["group"]]["held_out_triplets_removed"] += len(ex["triplets"]) - len(triplets)
        ex["triplets"] = triplets
    for group, report in enumerate(reports):
        rows = [ex for ex in kept if ex["group"] == group]
        per_relation = Counter(r for ex in rows for r in {f[1] for f in ex["facts"]})
        report["examples"] = len(rows)
        report["examples_per_relation"] = {r: per_relation[r] for r in sorted(per_relation, key=_relation_sort_key)}
    per_relation = {}
    for relation in sorted({k[1] for k in probe_keys}, key=_relation_sort_key):
        in_relation = {k for k in probe_keys if k[1] == relation}
        per_relation[relation] = {
            "probe_facts": len(in_relation),
            "sampled": len(in_relation & sampled),
            "held_out": len(in_relation & held_out_keys),
            "seen": len(in_relation & seen_keys),
        }
    report = {
        "sources": reports,
        "held_out": {
            "fraction": held_out_fraction,
            "seed": seed,
            "probe_facts": len(probe_keys),
            "sampled": len(sampled),
            "without_sentence": len(held_out_keys - sampled),
            "held_out_facts": len(held_out_keys),
            "seen_probe_facts": len(probe_keys & seen_keys),
            "per_relation": per_relation,
        },
        "seen_facts": len(seen_keys),
        "examples": len(kept),
        "max_examples": max_examples,
        "dropped_by_max_examples": dropped_by_cap,
        "probe_facts_unseen_by_cap": len(capped_keys),
        "relations": list(relations) if relations else None,
    }
    # columns rather than rows: a cap of 0 examples still gives a dataset with the corpus columns
    dataset = datasets.Dataset.from_dict(
        {
            "id": [ex["id"] for ex in kept],
            "text": [ex["text"] for ex in kept],
            "source": [ex["source"] for ex in kept],
            "knowledge": [
                {"entities": ex["entities"], "triplets": [dict(zip("hrt", t)) for t in ex["triplets"]]} for ex in kept
            ],
            "facts": [[dict(zip("hrt", f)) for f in ex["facts"]] for ex in kept],
        },
        features=CORPUS_FEATURES,
    )
    report["seconds"] = round(time.perf_counter() - start_time, 1)
    logger.info(
        "Pre-training corpus: %d examples, %d facts seen, %d of %d probe facts held out (%d sampled, %d "
        "without a sentence), %d unseen by the cap, in %.1fs",
        len(kept),
        len(seen_keys),
        len(held_out_keys),
        len(probe_keys),
        len(sampled),
        len(held_out_keys - sampled),
        len(capped_keys),
        report["seconds"],
    )
    return PretrainingCorpus(dataset, seen_keys, held_out_keys, report, capped_keys)


__all__ = [
    "SOURCE_KINDS",
    "CORPUS_FEATURES",
    "parse_source_spec",
    "sample_held_out",
    "kg_without_facts",
    "PretrainingCorpus",
    "load_pretraining_corpus",
]
