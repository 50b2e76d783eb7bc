"""``keplm kg-coverage``: will a KG help this task? What linking the data against the KG gives, before training.

    keplm kg-coverage --data ../shared/data/conll2003 --kg fb15k237:../shared/data/kg/fb15k-237 --link_case_sensitive
    keplm kg-coverage --data ../shared/data/ncbi_disease --kg hpo: --train_size 250 --output_dir coverage/ncbi

links every split as the run scripts do (the same cached linking pass) and reports, per split: the share of gold
entities overlapped by a linked mention and the share of linked mentions on a gold entity (NER), facts per linked
mention and the share of linked mentions with a fact, the relations of those facts; across splits: the share of
gold test entities unseen in training, and how many of those the KG links and reaches with facts (``--train_size``
takes the training sentences a run with ``--max_train_samples N --train_sample_seed S`` reads); and the linked
mentions that went through an ambiguous alias. Writes ``kg_coverage.json`` and ``kg_coverage.png`` into
``--output_dir`` when given; prints a table. docs/when_does_the_kg_help.md puts its numbers for the learning
curve's datasets beside the curve.
"""

from __future__ import annotations

import argparse
import json
import logging

from keplm.commands import HOPS_HELP, KG_SPEC_HELP, MAX_NEIGHBORS_HELP, NUM_PROC_HELP
from keplm.commands.build_kg import kg_summary, ner_gold_spans
from keplm.data import load_ner_dataset
from keplm.hub.figures import _pyplot, _save, relation_label
from keplm.io_utils import check_output_folder, replaced_folder
from keplm.knowledge.annotation import KnowledgeAnnotation
from keplm.knowledge.coverage import gold_texts, split_coverage, unseen_coverage
from keplm.knowledge.linker import EntityLinker, link_dataset, linker_settings
from keplm.knowledge.loaders import load_kg

logger = logging.getLogger(__name__)

REPORT_NAME, PLOT_NAME = "kg_coverage.json", "kg_coverage.png"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        required=True,
        help="NER data as run_ner.py reads it: a CoNLL folder or file, or a datasets Hub id (tokens, ner_tags)",
    )
    parser.add_argument("--kg", required=True, help=f"the KG to link --data against: {KG_SPEC_HELP}")
    parser.add_argument("--splits", nargs="+", help="splits to measure (unset: every split of --data)")
    parser.add_argument(
        "--train_size",
        type=int,
        help="read this many training sentences (as --max_train_samples), drawn with "
        "--train_sample_seed when given, else the first ones",
    )
    parser.add_argument(
        "--train_sample_seed",
        type=int,
        help="with --train_size: draw the training sentences at random with this seed (as the run scripts' option)",
    )
    parser.add_argument("--link_case_sensitive", action="store_true", help="as the run scripts' option")
    parser.add_argument("--hops", type=int, default=1, help=HOPS_HELP)
    parser.add_argument("--max_neighbors_per_entity", type=int, default=8, help=MAX_NEIGHBORS_HELP)
    parser.add_argument("--num_proc", type=int, default=1, help=NUM_PROC_HELP)
    parser.add_argument("--output_dir", help="write kg_coverage.json and kg_coverage.png here")
    parser.add_argument("--no_plot", action="store_true", help="do not draw kg_coverage.png")


def measure(dataset, kg, linker_kwargs: dict, num_proc: int = 1) -> dict:
    """The coverage report of a NER DatasetDict against ``kg`` (linked as the run scripts link)."""
    linker = EntityLinker(kg, **linker_kwargs)
    relation_names = dict(zip(kg.relation_ids, kg.relation_names))
    splits, parts = {}, {}
    for split, data in dataset.items():
        if len(data) == 0:
            raise ValueError(f"the {split} split of --data is empty: nothing to link")
        linked = link_dataset(
            data,
            kg,
            linker_kwargs,
            "tokens",
            split_into_words=True,
            linker=linker,
            num_proc=num_proc,
            desc=f"Linking {split}",
        )
        texts = [" ".join(tokens) for tokens in linked["tokens"]]
        gold = ner_gold_spans(linked, data.features["ner_tags"].feature.names)
        annotations = [KnowledgeAnnotation.from_dict(k) for k in linked["knowledge"]]
        parts[split] = (annotations, texts, gold)
        splits[split] = split_coverage(annotations, texts, gold, relation_names)
        mentions = [m.text for a in annotations for m in a.entities if m.id is not None]
        ambiguous = linker.ambiguous_occurrences(mentions).total()
        splits[split]["ambiguous_alias_share"] = ambiguous / len(mentions) if mentions else 0.0
    report = {
        "kg": kg_summary(kg),
        "linker": dict(linker_kwargs),
        "splits": splits,
        "ambiguity_rule": linker.ambiguity_rule,
    }
    if "train" in parts:
        train_annotations, train_texts, train_gold = parts["train"]
        report["unseen"] = {
            split: unseen_coverage(train_annotations, gold_texts(train_texts, train_gold), *part)
            for split, part in parts.items()
            if split != "train"
        }
    return report


def report_markdown(report: dict) -> str:
    """The report as the tables the command prints."""
    lines = [
        f"KG: {report['kg']['entities']} entities, {report['kg']['relations']} relations, "
        f"{report['kg']['triples']} triples",
        "",
        "| split | sentences | gold entities linked | links on a gold entity | facts / linked mention | "
        "linked mentions with a fact | ambiguous-alias links |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {split} | {r['examples']} | {r.get('gold_linking', {}).get('recall', 0):.1%} | "
        f"{r.get('gold_linking', {}).get('precision', 0):.1%} | {r['facts_per_linked_mention']:.2f} | "
        f"{r['linked_mentions_with_facts']:.1%} | {r['ambiguous_alias_share']:.1%} |"
        for split, r in report["splits"].items()
    ]
    if report.get("unseen"):
        lines += [
            "",
            "| split | gold entities | unseen in training | of those linked | of those with facts |",
            "|---|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {split} | {r['gold_entities']} | {r['unseen_share']:.1%} | {r['unseen_linked_share']:.1%} "
            f"| {r['unseen_with_facts_share']:.1%} |"
            for split, r in report["unseen"].items()
        ]
    for split, r in report["splits"].items():
        top = ", ".join(
            f"{relation_label(rid, name)} {share:.0%}" for rid, name, _, share in r["relations_reaching_mentions"][:8]
        )
        lines.append(
            f"\nRelations reaching {split} mentions ({r['distinct_relations_reaching_mentions']} in all): "
            f"{top or 'none'}"
        )
    return "\n".join(lines) + "\n"


def plot(report: dict, path) -> None:
    """Left: the coverage shares per split; right: the relations reaching the first split's mentions."""
    figure, (left, right) = _pyplot().subplots(1, 2, figsize=(11, 3.8))
    names = (
        "gold entities\nlinked",
        "links on a\ngold entity",
        "linked\nmentions\nwith a fact",
        "unseen\nentities\nwith facts",
    )
    splits = list(report["splits"])
    width = 0.8 / len(splits)
    for i, split in enumerate(splits):
        r = report["splits"][split]
        unseen = report.get("unseen", {}).get(split, {}).get("unseen_with_facts_share", float("nan"))
        values = (r["gold_linking"]["recall"], r["gold_linking"]["precision"], r["linked_mentions_with_facts"], unseen)
        left.bar([k + i * width for k in range(len(names))], [100 * v for v in values], width, label=split)
    left.set_xticks([k + 0.4 - width / 2 for k in range(len(names))], names, fontsize=8)
    left.set_ylabel("%")
    left.set_ylim(0, 100)
    left.legend(fontsize=8)
    left.set_title("What the KG reaches")
    relations = report["splits"][splits[-1]]["relations_reaching_mentions"][:10]
    right.barh(
        [relation_label(rid, name) for rid, name, _, _ in reversed(relations)],
        [100 * s for *_, s in reversed(relations)],
    )
    right.set_xlabel(f"% of the facts reaching {splits[-1]} mentions")
    right.set_title("Relations reaching mentions")
    _save(figure, path, dpi=120)


def run(args: argparse.Namespace) -> dict:
    if args.train_size is not None and args.train_size < 1:
        raise ValueError(f"--train_size must be at least 1, got {args.train_size}")
    if args.output_dir:
        check_output_folder(args.output_dir, REPORT_NAME, "kg-coverage")
    dataset = load_ner_dataset(args.data, max_train_samples=args.train_size, train_sample_seed=args.train_sample_seed)
    kg = load_kg(args.kg)  # a bad spec or a missing folder: load_kg's ValueError / FileNotFoundError
    if args.splits:
        missing = [split for split in args.splits if split not in dataset]
        if missing:
            raise ValueError(f"--splits {missing}: --data {args.data} has the splits {list(dataset)}")
        dataset = {split: dataset[split] for split in args.splits}
    linker_kwargs = linker_settings(
        args.link_case_sensitive, hops=args.hops, max_neighbors_per_entity=args.max_neighbors_per_entity
    )
    report = measure(dataset, kg, linker_kwargs, args.num_proc)
    report["settings"] = {name: getattr(args, name) for name in ("data", "kg", "train_size", "train_sample_seed")}
    print(report_markdown(report))
    if args.output_dir:
        with replaced_folder(args.output_dir, REPORT_NAME, "kg-coverage") as staging:  # whole or not at all
            (staging / REPORT_NAME).write_text(json.dumps(report, indent=2), encoding="utf-8")
            if not args.no_plot:
                try:
                    plot(report, staging / PLOT_NAME)
                except ImportError as error:
                    logger.warning("no plot: %s (pip install matplotlib)", error)
    return report


__all__ = ["add_arguments", "measure", "report_markdown", "plot", "run"]
