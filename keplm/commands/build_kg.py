"""``keplm build-kg``: annotate a dataset with KALA knowledge (mentions + facts) and report on it.

    keplm build-kg --task ner --dataset ../shared/data/conll2003 --kg fb15k237:../shared/data/kg/fb15k-237 \\
        --output_dir annotations/conll2003 --num_proc 2

writes ``<split>.json`` (KALA annotation JSON keyed by example id, readable by ``--knowledge annotations``
of the run scripts; every question of a QA context gets the context's annotation), ``report.json`` /
``report.md`` (linking coverage, seen/unseen entities between splits, facts per context) and
``entity_frequency.png`` (when matplotlib is installed). Linking is the run scripts' linking pass
(:func:`keplm.knowledge.link_dataset`: ``datasets.map``, cached, ``num_proc`` workers, progress bars).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from keplm.data import TEXT_COLUMNS
from keplm.knowledge.annotation import KnowledgeAnnotation, write_kala_annotations
from keplm.knowledge.construction import knowledge_report, linking_report, plot_entity_frequency
from keplm.knowledge.linker import link_dataset
from keplm.knowledge.loaders import load_kg

logger = logging.getLogger(__name__)



def gold_spans(tokens: list[str], tags: list[str]) -> list[tuple[int, int, str]]:
    """Character spans ``(start, end, type)`` of BIO entities over ``" ".join(tokens)``."""
    spans: list[tuple[int, int, str]] = []
    position = 0
    for token, tag in zip(tokens, tags):
        begin, end = position, position + len(token)
        position = end + 1
        continues = tag.startswith("I-") and spans and spans[-1][2] == tag[2:] and spans[-1][1] == begin - 1
        if continues:
            spans[-1] = (spans[-1][0], end, tag[2:])
        elif tag[:2] in ("B-", "I-"):
            spans.append((begin, end, tag[2:]))
    return spans


def build_knowledge(task: str, dataset, kg, output_dir, num_proc: int = 1, linker_kwargs: dict | None = None,
                    relation_extractor=None, splits=None, plot: bool = True) -> dict:
    """Annotate every split, write KALA JSON per split and the reports; return the report dict."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    column, words = TEXT_COLUMNS[task]
    annotate = relation_extractor.annotate if relation_extractor is not None else None
    timings, annotated = {}, {}
    for split in splits or list(dataset):
        start = time.perf_counter()
        data = link_dataset(dataset[split], kg, dict(linker_kwargs or {}), column, split_into_words=words,
                            annotate=annotate, annotate_signature=repr(relation_extractor), num_proc=num_proc,
                            desc=f"Linking {split}")
        timings[split] = time.perf_counter() - start
        annotations = {str(i): KnowledgeAnnotation.from_dict(k) for i, k in zip(data["id"], data["knowledge"])}
        write_kala_annotations(annotations, output_dir / f"{split}.json")
        if task == "qa":  # the report counts every context once, not once per question
            data = data.select(sorted({c: i for i, c in reversed(list(enumerate(data["context"])))}.values()))
        annotated[split] = data
    report = _report(task, dataset, annotated)
    report["seconds"] = timings
    report["kg"] = {"entities": kg.num_entities, "relations": kg.num_relations, "triples": kg.num_triples,
                    "content_hash": kg.content_hash()}
    frequencies = report["knowledge"].pop("_frequencies")
    if plot:
        try:
            plot_entity_frequency(frequencies, output_dir / "entity_frequency.png")
        except ImportError as error:
            logger.warning("%s (skipping the plot)", error)
    (output_dir / "report.json").write_text(json.dumps(report, indent=2))
    (output_dir / "report.md").write_text(report_markdown(report))
    return report


def _report(task: str, dataset, annotated: dict) -> dict:
    linking = {}
    for split, data in annotated.items():
        annotations = [KnowledgeAnnotation.from_dict(k) for k in data["knowledge"]]
        if task == "ner":
            names = dataset[split].features["ner_tags"].feature.names
            texts = [" ".join(t) for t in data["tokens"]]
            gold = [gold_spans(t, [names[i] for i in tags]) for t, tags in zip(data["tokens"], data["ner_tags"])]
        else:
            texts, gold = data["context"], None
        linking[split] = linking_report(texts, annotations, gold)
    splits = {s: [KnowledgeAnnotation.from_dict(k) for k in d["knowledge"]] for s, d in annotated.items()}
    train = "train" if "train" in splits else next(iter(splits))
    return {"task": task, "linking": linking, "knowledge": knowledge_report(splits, train_split=train)}


def report_markdown(report: dict) -> str:
    lines = ["# Knowledge construction report", "",
             f"KG: {report['kg']['entities']} entities, {report['kg']['relations']} relations, "
             f"{report['kg']['triples']} triples (sha256 {report['kg']['content_hash'][:12]})", "",
             "| split | examples | mentions/example | char coverage | facts/example | seconds |",
             "|---|---|---|---|---|---|"]
    for split, r in report["linking"].items():
        lines.append(f"| {split} | {r['examples']} | {r['mentions_per_example']:.2f} | {r['character_coverage']:.1%} "
                     f"| {r['facts_per_example']:.1f} | {report['seconds'][split]:.1f} |")
    knowledge = report["knowledge"]
    lines += ["", f"Training entities: {knowledge['train_entities']} ({knowledge['train_mentions']} mentions; "
              f"{knowledge['entity_frequency']['seen_once']} seen once; max frequency "
              f"{knowledge['entity_frequency']['max']}).", "",
              "| split | contexts | entities | unseen in train | contexts with 3+ unseen | facts/context (max) |",
              "|---|---|---|---|---|---|"]
    for split, r in knowledge["splits"].items():
        lines.append(f"| {split} | {r['contexts']} | {r['entities']} | {r['unseen_entities']} | "
                     f"{r['contexts_with_3+_unseen']} | {r['facts_per_context_mean']:.1f} "
                     f"({r['facts_per_context_max']}) |")
    for split, r in report["linking"].items():
        if "gold_entities_linked" in r:
            shares = ", ".join(f"{k} {v['share']:.0%}" for k, v in r["gold_entities_linked"].items())
            lines.append(f"\nGold entities overlapped by a linked mention ({split}): {shares}")
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", choices=("ner", "qa"), required=True)
    parser.add_argument("--dataset", required=True, help="dataset dir/file or Hub id (as the run scripts take)")
    parser.add_argument("--kg", required=True, help="KG spec for keplm.knowledge.load_kg, e.g. fb15k237:<dir>")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--splits", nargs="*", default=None)
    parser.add_argument("--num_proc", type=int, default=1)
    parser.add_argument("--hops", type=int, default=1)
    parser.add_argument("--max_neighbors_per_entity", type=int, default=8)
    parser.add_argument("--relation_source", choices=("kg", "model"), default="kg",
                        help="facts from KG lookup, or from a relation-extraction model (--re_model)")
    parser.add_argument("--re_model", default=None, help="a keplm relation-extraction checkpoint")
    parser.add_argument("--link_case_sensitive", action="store_true",
                        help="match KG names case-sensitively (as the run scripts' --link_case_sensitive)")
    parser.add_argument("--spacy_model", default=None, help="keep only mentions inside spaCy entities (optional)")
    parser.add_argument("--no_plot", action="store_true")


def run(args: argparse.Namespace) -> dict:
    from keplm.data import load_ner_dataset, load_qa_dataset

    dataset = load_ner_dataset(args.dataset) if args.task == "ner" else load_qa_dataset(args.dataset)
    start = time.perf_counter()
    kg = load_kg(args.kg)
    logger.info("Loaded %r in %.1fs", kg, time.perf_counter() - start)
    linker_kwargs = {"hops": args.hops, "max_neighbors_per_entity": args.max_neighbors_per_entity,
                     "lowercase": not args.link_case_sensitive}
    if args.spacy_model:
        from keplm.knowledge.construction import SpacyMentionFilter

        linker_kwargs["mention_filter"] = SpacyMentionFilter(args.spacy_model)
    extractor = None
    if args.relation_source == "model":
        if not args.re_model:
            raise ValueError("--relation_source model needs --re_model <checkpoint>")
        from keplm.modeling.modeling_relation_extraction import RelationExtractor

        extractor = RelationExtractor.from_pretrained(args.re_model)
    report = build_knowledge(args.task, dataset, kg, args.output_dir, args.num_proc, linker_kwargs, extractor,
                             args.splits, plot=not args.no_plot)
    print(report_markdown(report))
    return report


__all__ = ["build_knowledge", "gold_spans", "report_markdown", "add_arguments", "run"]
