"""``keplm train-kge``: train KG embeddings for TRELM's knowledge injection (TRELM §3.1) and save them with the KG.

    keplm train-kge --kg trex:../shared/data/lama --output_dir outputs/kge/trex-transe --model transe --dim 128

loads the KG (any :func:`keplm.knowledge.load_kg` spec), trains a torch-geometric KGE model on its triples
(:func:`keplm.knowledge.kge.train_kge`) and writes ``DIR`` = the KG with ``entity_vectors.safetensors``
(``KnowledgeGraph.save_pretrained``, loadable as ``pretrained:DIR`` or ``KnowledgeGraph.from_pretrained(DIR)``) plus
``DIR/kge_report.json`` (settings, loss per epoch, raw tail-ranking metrics on the held-out triples, seconds; the KG
spec recorded as given), and prints a short markdown summary.

After the KG changed (new entities, new facts), a model trained on the old vectors needs the new entities in the
same vector space, not a new space:

    keplm train-kge --kg jsonl:kg_updated.jsonl --keep_vectors_from outputs/kge/old --output_dir outputs/kge/updated

keeps the stored vectors of every entity the old folder holds and trains only the new ones (same model and
``--dim`` as the old run, checked against its ``kge_report.json``); ``TrelmProcessor.update_knowledge`` then gives
a trained TRELM model the new entities.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from keplm.commands import KG_SPEC_HELP
from keplm.data.lama import read_fact_keys
from keplm.data.pretraining import kg_without_facts
from keplm.file_utils import KG_CONFIG_NAME
from keplm.io_utils import check_output_folder, replaced_folder
from keplm.knowledge.kge import KGE_MODELS, check_kge_settings, train_kge
from keplm.knowledge.loaders import load_kg

KGE_MODEL_HELP = f"one of {', '.join(sorted(KGE_MODELS))}"

REPORT_NAME = "kge_report.json"
#: the options passed to :func:`~keplm.knowledge.kge.train_kge` as its arguments of the same names
SAME_NAME_OPTIONS = (
    "model",
    "dim",
    "epochs",
    "batch_size",
    "lr",
    "weight_decay",
    "margin",
    "p_norm",
    "valid_fraction",
    "max_eval_triples",
    "seed",
    "device",
)


def report_markdown(report: dict) -> str:
    """A few lines on what was trained and how well it ranks held-out tails."""
    lines = [
        "# KG embeddings",
        "",
        f"KG `{report.get('kg_spec', '?')}`: {report['kg']['entities']} entities, {report['kg']['relations']} "
        f"relations, {report['triples']['total']} triples ({report['triples']['train']} train, "
        f"{report['triples']['valid']} held out); sha256 {report['kg']['content_hash'][:12]} with vectors",
        "",
        f"{report['torch_geometric_class']} dim {report['dim']} ({report['vectors']}), {report['epochs']} epochs, "
        f"batch {report['batch_size']}, {report['optimizer']} lr {report['lr']:g}, seed {report['seed']}, "
        f"{report['device']}: loss {report['losses'][0]:.4f} -> {report['losses'][-1]:.4f} in "
        f"{report['seconds']['train']:.1f}s of training (ranking the held-out triples: "
        f"{report['seconds']['rank']:.1f}s)",
    ]
    excluded = report.get("excluded_facts")
    kept = report.get("kept_vectors")
    if kept:
        lines += [
            "",
            f"Kept the stored vectors of {kept['entities']} entities (from `{kept.get('from', '?')}`, sha256 "
            f"{kept['source_content_hash'][:12]}); trained {kept['trained']} new entities and every relation.",
        ]
    if excluded:
        lines += [
            "",
            f"Excluded before training: {excluded['triples_removed']} triples of {excluded['keys']} fact "
            f"keys ({excluded['keys_not_in_kg']} not in the KG) from {', '.join(excluded['files'])}.",
        ]
    metrics = report["metrics"]
    if metrics:
        lines += [
            "",
            "| held-out triples | MRR | chance MRR | Hits@1 | Hits@10 | mean rank |",
            "|---|---|---|---|---|---|",
            f"| {metrics['triples']} | {metrics['mrr']:.4f} | {metrics['chance_mrr']:.4f} | "
            f"{metrics['hits@1']:.4f} | {metrics['hits@10']:.4f} | {metrics['mean_rank']:.1f} |",
            "",
            f"Protocol: {metrics['protocol']}.",
        ]
    else:
        lines += ["", "No triples held out (valid_fraction 0): no metrics."]
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kg",
        required=True,
        help=f"the KG whose entities and relations are embedded: {KG_SPEC_HELP}",
    )
    parser.add_argument("--output_dir", required=True, help="where the KG with its vectors and kge_report.json go")
    parser.add_argument("--model", default="transe", help=KGE_MODEL_HELP)
    parser.add_argument("--dim", type=int, default=128, help="stored vector width (complex/rotate: even)")
    parser.add_argument("--epochs", type=int, default=50, help="passes over the training triples")
    parser.add_argument("--batch_size", type=int, default=1000, help="training triples per step")
    parser.add_argument(
        "--lr",
        type=float,
        help="learning rate (unset: torch_geometric's FB15k-237 example's for --model)",
    )
    parser.add_argument(
        "--weight_decay",
        type=float,
        help="optimizer weight decay; above 0 needs --dense (unset: torch_geometric's FB15k-237 example's for "
        "--model with --dense, else 0)",
    )
    parser.add_argument(
        "--margin",
        type=float,
        help="transe's and distmult's ranking-loss margin, rotate's score margin; complex has none (unset: 9 for "
        "rotate, else torch_geometric's default, 1)",
    )
    parser.add_argument(
        "--p_norm",
        type=float,
        help="transe only: the p of its L-p distance and of its stored vectors' normalisation (unset: "
        "torch_geometric's default, 1)",
    )
    parser.add_argument(
        "--valid_fraction",
        type=float,
        default=0.05,
        help="triples held out for MRR / Hits@k (0: train on all, no metrics)",
    )
    parser.add_argument(
        "--max_eval_triples",
        type=int,
        default=1000,
        help="rank at most this many held-out triples (a seeded sample; each scores every entity)",
    )
    parser.add_argument(
        "--exclude_facts",
        nargs="+",
        help=(
            "fact-key TSV files (sub_uri<TAB>predicate_id<TAB>obj_uri, e.g. run_pretraining's held_out_facts.tsv): "
            "their triples are removed from the KG before training, so the embeddings cannot encode them"
        ),
    )
    parser.add_argument(
        "--keep_vectors_from",
        help=(
            "a `keplm train-kge` output folder (or KG spec with vectors): its entities keep their vectors and only the "
            "KG's other entities (and the relations) are trained, so a model trained on those vectors can read the new "
            "entities (same --model and --dim as that run)"
        ),
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=42,
        help="seeds the held-out triples and the ranked sample, the initialisation, shuffling and negative sampling "
        "(deterministic on CPU)",
    )
    parser.add_argument("--device", default="cpu", help="torch device to train on, e.g. cpu, cuda, cuda:1")
    parser.add_argument(
        "--dense",
        action="store_true",
        help=(
            "dense embedding gradients (Adam/Adagrad with weight decay, as torch_geometric's example); without it: "
            "sparse gradients, only the batch's rows updated (SparseAdam), many times faster on a large KG"
        ),
    )
    parser.add_argument(
        "--num_threads", type=int, help="torch CPU threads (1 avoids thread contention on a busy machine)"
    )
    parser.add_argument("--no_progress", action="store_true", help="no progress bars")


def _keep_vectors(args: argparse.Namespace):
    """The KG of ``--keep_vectors_from``, after checking that its ``kge_report.json`` (when there is one) names the
    same model and width as this run."""
    source = args.keep_vectors_from
    report_path = Path(source) / REPORT_NAME
    if report_path.is_file():
        old = json.loads(report_path.read_text())
        if (old.get("model"), old.get("dim")) != (args.model.lower(), args.dim):
            raise ValueError(
                f"--keep_vectors_from {source} holds {old.get('model')} vectors of dim {old.get('dim')}, "
                f"but this run trains {args.model} of dim {args.dim}: use the same --model and --dim"
            )
    elif Path(source).is_dir() and not (Path(source) / KG_CONFIG_NAME).is_file():
        raise FileNotFoundError(
            f"--keep_vectors_from {source}: no saved KG in this folder (a `keplm train-kge` "
            f"output has kg_config.json and kge_report.json)"
        )
    kg = load_kg(source)
    if kg.entity_vectors is None:
        raise ValueError(
            f"--keep_vectors_from {source}: this KG has no entity vectors (train them with `keplm train-kge`)"
        )
    return kg


def run(args: argparse.Namespace) -> dict:
    # the settings and the output folder are checked before the (possibly long) KG load
    check_output_folder(args.output_dir, REPORT_NAME, "train-kge")
    check_kge_settings(
        args.model, args.dim, args.epochs, args.batch_size, args.valid_fraction, margin=args.margin, p_norm=args.p_norm
    )
    if args.num_threads is not None:
        if args.num_threads <= 0:
            raise ValueError(f"--num_threads must be positive, got {args.num_threads}")
        torch.set_num_threads(args.num_threads)
    keep = _keep_vectors(args) if args.keep_vectors_from else None
    start = time.perf_counter()
    kg = load_kg(args.kg)
    excluded = None
    if args.exclude_facts:
        keys = set().union(*(read_fact_keys(path) for path in args.exclude_facts))
        kg = kg_without_facts(kg, keys, drop_vectors=True)
        excluded = {"files": list(args.exclude_facts), **kg.build_report["facts_removed"]}
    load_seconds = time.perf_counter() - start
    kg, report = train_kge(
        kg,
        **{name: getattr(args, name) for name in SAME_NAME_OPTIONS},
        sparse=not args.dense,
        progress=not args.no_progress,
        keep_vectors=keep,
    )
    if keep is not None:
        report["kept_vectors"]["from"] = args.keep_vectors_from
    report = {"kg_spec": args.kg, "excluded_facts": excluded, **report}  # the specs as given: no resolved paths
    report["seconds"]["load_kg"] = load_seconds
    with replaced_folder(args.output_dir, REPORT_NAME, "train-kge") as staging:  # whole or not at all
        kg.save_pretrained(staging)
        (staging / REPORT_NAME).write_text(json.dumps(report, indent=2) + "\n")
    print(report_markdown(report))
    return report


__all__ = ["REPORT_NAME", "add_arguments", "report_markdown", "run"]
