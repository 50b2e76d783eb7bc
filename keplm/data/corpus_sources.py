"""The readers of TRELM's pre-training corpus sources (see :mod:`keplm.data.pretraining` for the specs):
T-REx evidences, FewRel sentences, KALA annotation files and a downstream task's training text, each giving
examples ``{"id", "text", "source", "knowledge", "facts"}`` and a report of what was read, kept and skipped."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from keplm.io_utils import progress, read_json
from keplm.knowledge.annotation import KnowledgeAnnotation

from . import limit_samples, load_ner_dataset, load_qa_dataset
from .lama import _relation_files, read_fact_file

logger = logging.getLogger(__name__)

#: why an evidence / sentence / annotated example is not in the corpus (all counted per source)
SKIP_REASONS = (
    "no_mask",
    "several_masks",
    "no_object_surface",
    "no_subject_surface",
    "subject_not_found",
    "subject_overlaps_object",
    "no_ids",
    "bad_positions",
    "empty_mention",
    "no_text",
    "span_mismatch",
)
FactKey = tuple[str, str, str]


# --------------------------------------------------------------------------- collecting examples


def _new_report(spec: str, kind: str) -> dict:
    return {
        "spec": spec,
        "kind": kind,
        "read": 0,
        "kept": 0,
        "skipped": {},
        "deduplicated": 0,
        "merged": 0,
        "mentions_dropped_overlap": 0,
    }


def _skip(report: dict, reason: str, count: int = 1) -> None:
    report["skipped"][reason] = report["skipped"].get(reason, 0) + count


class _Collector:
    """Examples of one source keyed by text: a repeated text of the same facts is a duplicate (counted), a text
    shared by other facts is merged into one example carrying all of them (counted as ``merged``)."""

    def __init__(self, kind: str, report: dict):
        self.kind, self.report, self.by_text = kind, report, {}

    def add(
        self,
        example_id: str,
        text: str,
        entities: list[dict],
        facts: list[FactKey],
        triplets: list[FactKey] | None = None,
    ) -> None:
        example = self.by_text.get(text)
        triplets = list(facts) if triplets is None else triplets
        if example is None:
            example = self.by_text[text] = {
                "id": example_id,
                "text": text,
                "source": self.kind,
                "entities": [],
                "facts": [],
                "triplets": [],
            }
        elif set(facts) <= set(example["facts"]) and set(triplets) <= set(example["triplets"]):
            self.report["deduplicated"] += 1
            return
        else:
            self.report["merged"] += 1
        self.report["kept"] += 1
        for mention in entities:  # non-overlapping mentions only (the KALA processor expects them)
            spans = example["entities"]
            if mention in spans:  # the same span of the same text and entity
                continue
            if any(m["start"] < mention["end"] and mention["start"] < m["end"] for m in spans):
                self.report["mentions_dropped_overlap"] += 1
                continue
            spans.append(mention)
        example["facts"].extend(f for f in facts if f not in example["facts"])
        example["triplets"].extend(t for t in triplets if t not in example["triplets"])

    def examples(self) -> list[dict]:
        for example in self.by_text.values():
            example["entities"].sort(key=lambda m: (m["start"], m["end"]))
        return list(self.by_text.values())


def _mention(text: str, start: int, end: int, entity_id: str | None) -> dict:
    return {"text": text[start:end], "start": start, "end": end, "id": entity_id}


# --------------------------------------------------------------------------- T-REx evidences


def restore_evidence(evidence: dict, sub_uri: str, obj_uri: str) -> tuple[str, list[dict]] | str:
    """``(text, mentions)`` of one LAMA evidence (``[MASK]`` replaced by ``obj_surface``; subject and object as
    character spans), or the skip reason. The subject is its first occurrence outside the object; when it only
    occurs around the object ("[MASK] Prince Royal" with object "Nissan") the subject mention is kept alone."""
    masked, obj, sub = evidence.get("masked_sentence") or "", evidence.get("obj_surface"), evidence.get("sub_surface")
    masks = masked.count("[MASK]")
    if masks != 1:
        return "no_mask" if masks == 0 else "several_masks"
    if not obj:
        return "no_object_surface"
    if not sub:
        return "no_subject_surface"
    start = masked.index("[MASK]")
    text = masked[:start] + obj + masked[start + len("[MASK]") :]
    obj_end = start + len(obj)
    around = None
    position = text.find(sub)
    while position >= 0:
        end = position + len(sub)
        if end <= start or position >= obj_end:
            return text, [_mention(text, position, end, sub_uri), _mention(text, start, obj_end, obj_uri)]
        if around is None and position <= start and end >= obj_end:
            around = (position, end)
        position = text.find(sub, position + 1)
    if around is not None:
        return text, [_mention(text, *around, sub_uri)]
    return "subject_not_found" if sub not in text else "subject_overlaps_object"


def _trex_files(path: str) -> list[str]:
    if os.path.isfile(path):
        return [path]
    folder = os.path.join(path, "TREx") if os.path.isdir(os.path.join(path, "TREx")) else path
    files = _relation_files(folder)
    if not files:
        raise FileNotFoundError(f"no LAMA T-REx P*.jsonl(.gz) files in {path}")
    return files


def read_trex_examples(
    path: str, relations: Sequence[str] | None = None, spec: str | None = None
) -> tuple[list[dict], list[dict], dict]:
    """``(examples, facts, report)`` of the LAMA T-REx evidences under ``path``: ``facts`` are the probe facts
    read (``keplm.data.lama.read_fact_file`` dicts), ``report`` counts evidences read, kept, skipped by reason,
    duplicates of the same fact and sentences shared by several facts (``merged``)."""
    report = _new_report(spec or f"trex:{path}", "trex")
    report.update(facts=0, facts_without_ids=0, object_inside_subject=0)
    collector, facts, keep = _Collector("trex", report), [], set(relations) if relations else None
    for file in progress(_trex_files(path), "Reading T-REx evidences", unit=" files"):
        for fact in read_fact_file(file):
            if keep is not None and fact["relation"] not in keep:
                continue
            report["facts"] += 1
            if not fact["sub_uri"] or not fact["obj_uri"]:  # no key: neither held out nor seen, counted
                report["facts_without_ids"] += 1
                report["read"] += len(fact["evidences"])
                _skip(report, "no_ids", len(fact["evidences"]))
                continue
            facts.append(fact)
            key = (str(fact["sub_uri"]), fact["relation"], str(fact["obj_uri"]))
            for index, evidence in enumerate(fact["evidences"]):
                report["read"] += 1
                restored = restore_evidence(evidence, key[0], key[2])
                if isinstance(restored, str):
                    _skip(report, restored)
                    continue
                text, mentions = restored
                report["object_inside_subject"] += len(mentions) == 1
                collector.add(f"trex/{fact['relation']}/{fact['uuid'] or key[0]}/{index}", text, mentions, [key])
    return collector.examples(), facts, report


# --------------------------------------------------------------------------- FewRel

_NO_SPACE_BEFORE = set(", . ; : ! ? ) ] } % ' '' ” ’ ... .. 's 'S ’s n't 're 've 'll 'd 'm".split())
_NO_SPACE_AFTER = set("( [ { $ £ # `` “ ‘".split())
_JOINERS = {"-", "–", "—", "/"}  # "four - lane" -> "four-lane", "1987 – 1990" -> "1987–1990"


def detokenize(tokens: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """``(text, offsets)``: the tokens joined Moses-style (no space before closing punctuation and clitics, none
    after opening brackets, none around hyphens, dashes and slashes, straight double quotes alternating open /
    close) and each token's ``(start, end)`` in the text. Whitespace-only tokens become empty spans."""
    parts, offsets, length, no_space_next, quote_open = [], [], 0, True, False
    for token in tokens:
        if not token.strip():
            offsets.append((length, length))
            continue
        attach = no_space_next or token in _NO_SPACE_BEFORE or token in _JOINERS
        if token == '"':
            attach = attach or quote_open  # a closing quote sticks to the word before it
        if not attach:
            parts.append(" ")
            length += 1
        parts.append(token)
        offsets.append((length, length + len(token)))
        length += len(token)
        no_space_next = token in _NO_SPACE_AFTER or token in _JOINERS or (token == '"' and not quote_open)
        if token == '"':
            quote_open = not quote_open
    return "".join(parts), offsets


def read_fewrel_examples(
    path: str, relations: Sequence[str] | None = None, spec: str | None = None
) -> tuple[list[dict], dict]:
    """``(examples, report)`` of a FewRel file (``{"P177": [{"tokens", "h": [name, Qid, [[positions]]], "t"}]}``):
    detokenized text, head/tail mentions (every occurrence) with their Wikidata ids, the fact ``(h, P, t)``."""
    report = _new_report(spec or f"fewrel:{path}", "fewrel")
    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected FewRel's JSON object keyed by relation id, got {type(data).__name__}")
    collector, keep = _Collector("fewrel", report), set(relations) if relations else None
    for relation in progress(
        sorted(data, key=lambda r: int(r[1:]) if r[1:].isdigit() else 0), "Reading FewRel", unit=" relations"
    ):
        if keep is not None and relation not in keep:
            continue
        for index, instance in enumerate(data[relation]):
            report["read"] += 1
            try:
                tokens, (_, head, head_positions), (_, tail, tail_positions) = (
                    instance["tokens"],
                    instance["h"],
                    instance["t"],
                )
            except (KeyError, TypeError, ValueError):
                raise ValueError(
                    f"{path}: {relation}[{index}]: expected 'tokens', 'h' and 't' as [name, id, [[positions]]]"
                ) from None
            if not head or not tail:
                _skip(report, "no_ids")
                continue
            text, offsets = detokenize(tokens)
            mentions, reason = [], None
            for entity_id, occurrences in ((str(head), head_positions), (str(tail), tail_positions)):
                for positions in occurrences or [[]]:
                    if not positions or not all(isinstance(p, int) and 0 <= p < len(tokens) for p in positions):
                        reason = reason or "bad_positions"
                        continue
                    start, end = offsets[min(positions)][0], offsets[max(positions)][1]
                    if start >= end:
                        reason = reason or "empty_mention"
                        continue
                    mentions.append(_mention(text, start, end, entity_id))
            if reason is not None:
                _skip(report, reason)
                continue
            collector.add(f"fewrel/{relation}/{index}", text, mentions, [(str(head), relation, str(tail))])
    return collector.examples(), report


# --------------------------------------------------------------------------- KALA annotation files (build-kg)


def _annotation_files(path: str) -> tuple[list[str], str | None]:
    """The annotation files of a file or a build-kg folder, and the task its ``report.json`` names."""
    if os.path.isfile(path):
        return [path], None
    files = sorted(
        os.path.join(path, n)
        for n in os.listdir(path)
        if n.endswith((".json", ".json.gz")) and not n.startswith(("report.", "corpus_report."))
    )
    if not files:
        raise FileNotFoundError(f"no KALA annotation <split>.json files in {path}")
    report_path = os.path.join(path, "report.json")
    task = read_json(report_path).get("task") if os.path.isfile(report_path) else None
    return files, task


def _dataset_texts(dataset_spec: str, task: str | None) -> tuple[str, dict[str, dict[str, str]]]:
    """``(task, {split: {example id: text}})`` of the dataset an annotation file was built from."""
    prefix, sep, rest = dataset_spec.partition(":")
    if sep and prefix in ("ner", "qa"):
        task, dataset_spec = prefix, rest
    if task not in ("ner", "qa"):
        raise ValueError(
            f"annotation dataset {dataset_spec!r}: name the task as ner:<dataset> or qa:<dataset> "
            "(a build-kg folder's report.json names it)"
        )

    if task == "ner":
        data = load_ner_dataset(dataset_spec)
        return task, {s: {str(i): " ".join(t) for i, t in zip(d["id"], d["tokens"])} for s, d in data.items()}
    data = load_qa_dataset(dataset_spec)
    return task, {s: dict(zip(map(str, d["id"]), d["context"])) for s, d in data.items()}


def read_annotation_examples(path: str, dataset: str | None = None, spec: str | None = None) -> tuple[list[dict], dict]:
    """``(examples, report)`` of KALA annotation JSON (a file or a ``keplm build-kg`` folder). The text of an entry
    is its own ``"text"`` or, given ``dataset`` (``ner:<path>`` / ``qa:<path>``), the example of that id: for NER in
    the split named like the file (``train.json`` -> ``train``), for QA in any split (question ids are unique).
    Every mention span is checked against the text (``span_mismatch`` when it does not match)."""
    report = _new_report(spec or f"annotations:{path}", "annotations")
    files, task = _annotation_files(path)
    task, texts = _dataset_texts(dataset, task) if dataset else (task, {})
    collector = _Collector("annotations", report)
    for file in progress(files, "Reading annotation files", unit=" files"):
        split = os.path.basename(file).split(".")[0]
        if texts and task == "ner" and split not in texts:
            raise ValueError(f"{file}: the NER dataset {dataset!r} has no {split!r} split (it has {list(texts)})")
        lookup = (
            texts.get(split)
            if task == "ner"
            else {k: v for split_texts in texts.values() for k, v in split_texts.items()}
        )
        data = read_json(file)
        if not isinstance(data, dict):
            raise ValueError(f"{file}: expected a JSON object keyed by example id, got {type(data).__name__}")
        for key, value in data.items():
            report["read"] += 1
            text = value.get("text") if isinstance(value, dict) else None
            text = text if isinstance(text, str) else (lookup or {}).get(str(key))
            if not text:
                _skip(report, "no_text")
                continue
            try:
                annotation = KnowledgeAnnotation.from_dict(value)
            except (ValueError, TypeError, AttributeError) as error:  # a malformed file: an error, not a skip
                raise ValueError(f"{file}: example {key!r}: {error}") from None
            try:
                annotation.validate(text)
            except ValueError as error:
                logger.debug("%s: example %s: %s", file, key, error)
                _skip(report, "span_mismatch")
                continue
            mentions = [_mention(text, m.start, m.end, m.id) for m in annotation.entities]
            triplets = [(t.h, t.r, t.t) for t in annotation.triplets]
            mentioned = {m.id for m in annotation.entities if m.id is not None}
            facts = [t for t in triplets if t[0] in mentioned and t[2] in mentioned]
            collector.add(f"annotations/{split}/{key}", text, mentions, facts, triplets)
    if report["skipped"].get("no_text") == report["read"] and report["read"]:
        raise ValueError(
            f"{path}: no annotation has a text: pass the dataset it was built from "
            "(annotations:<path>|ner:<dataset> or |qa:<dataset>)"
        )
    return collector.examples(), report


def _task_options(spec: str, options: list[str]) -> dict:
    parsed = {"first": None, "articles": None}
    for option in options:
        key, _, value = option.partition("=")
        try:
            if key == "first" and int(value) > 0:
                parsed["first"] = int(value)
                continue
            if key == "articles" and len(value.split(",")) == 3:
                parsed["articles"] = tuple(None if v in ("", "none") else int(v) for v in value.split(","))
                continue
        except ValueError:
            pass
        raise ValueError(
            f"pre-training source {spec!r}: bad option {option!r} (first=N with N > 0, articles=TRAIN,VALIDATION,TEST)"
        )
    return parsed


def read_task_examples(path: str, task_and_options: str, spec: str | None = None) -> tuple[list[dict], dict]:
    """``(examples, report)``: the train-split text of an NER or QA dataset, without entity annotations (see the
    module docstring, ``task:``)."""
    task, *options = task_and_options.split("|")
    spec = spec or f"task:{task}:{path}"
    options = _task_options(spec, options)
    report = _new_report(spec, "task")

    if task == "ner":
        if options["articles"]:
            raise ValueError(f"pre-training source {spec!r}: articles= splits a SQuAD file (task:qa)")
        data = load_ner_dataset(path, max_train_samples=options["first"])
        rows = [(str(i), " ".join(tokens)) for i, tokens in zip(data["train"]["id"], data["train"]["tokens"])]
    else:
        data = load_qa_dataset(path, split_by_article=options["articles"])
        train = limit_samples(data, {"train": options["first"]})["train"]
        rows = list(zip(map(str, train["id"]), train["context"]))
    collector = _Collector("task", report)
    for example_id, text in rows:
        report["read"] += 1
        if not text.strip():
            _skip(report, "no_text")
            continue
        collector.add(f"task/{example_id}", text, [], [])
    return collector.examples(), report


__all__ = [
    "SKIP_REASONS",
    "FactKey",
    "restore_evidence",
    "detokenize",
    "read_trex_examples",
    "read_fewrel_examples",
    "read_annotation_examples",
    "read_task_examples",
]
