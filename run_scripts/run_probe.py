#!/usr/bin/env python
"""LAMA-style knowledge probing of any masked-LM checkpoint (TRELM section 4), in the style of Hugging Face's
example scripts.

    python run_scripts/run_probe.py --model_name_or_path <masked-LM dir or Hub id> --probe lama_trex \\
        --data_dir ../shared/data --output_dir outputs/probe

``--probe`` is ``lama_trex`` (LAMA T-REx with the relations.jsonl templates), ``pararel`` (ParaRel's paraphrased
patterns over its LM-vocabulary facts), ``autoprompt_dev`` / ``autoprompt_train`` (AutoPrompt's T-REx facts with
the LAMA templates), a folder of ``P*.jsonl`` fact files or one such file (``--templates_file`` then names the
templates: a relations.jsonl or a ParaRel patterns folder). Each template is filled with the subject and the mask
token; facts whose object is not one token of the model's vocabulary are skipped and counted (LAMA's rule).
P@k is macro-averaged over relations (LAMA's "mean P@1") and also given per relation and micro-averaged, in percent
(``metric_unit`` in the results, as every run script's metrics).

The output directory gets ``probe_results.json``, ``probe_results.md`` (a per-relation table) and, with
``--save_predictions``, ``predictions.jsonl``. A checkpoint without a trained MLM head (e.g. an encoder-only
one such as the MiniLM package's) gets a newly initialised head: its P@k measures nothing, and the script says so
(``mlm_head.newly_initialized`` in the results).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field

import torch
import transformers
from transformers import AutoModelForMaskedLM, AutoTokenizer

import keplm  # noqa: F401  (registers keplm's models with the Auto classes)
from keplm.data.lama import load_probe, read_common_vocab, read_fact_keys
from keplm.metric_units import METRIC_UNIT, METRIC_UNIT_KEY
from keplm.training import runtime
from keplm.training.arguments import ModelArguments, parse_args
from keplm.training.probing import probe

logger = logging.getLogger(__name__)


@dataclass
class ProbeArguments:
    output_dir: str = field(metadata={"help": "Where probe_results.json and probe_results.md are written."})
    probe: str = field(
        default="lama_trex",
        metadata={
            "help": "lama_trex, pararel, autoprompt_dev, autoprompt_train, or a folder of P*.jsonl fact "
            "files, or one fact file (lines with sub_label, obj_label and predicate_id)."
        },
    )
    data_dir: str = field(
        default="../shared/data", metadata={"help": "The folder holding lama/ and pararel/ (for the named probes)."}
    )
    templates_file: str | None = field(
        default=None,
        metadata={
            "help": "Templates: a relations.jsonl (relation, template with [X] and [Y]) or a ParaRel "
            "patterns folder; default: LAMA's relations.jsonl (ParaRel's patterns for --probe pararel)."
        },
    )
    relations: list[str] | None = field(default=None, metadata={"help": "Probe only these relations (P19 P20 ...)."})
    max_facts_per_relation: int | None = field(
        default=None, metadata={"help": "Read at most this many facts per relation (file order; for quick runs)."}
    )
    common_vocab: str | None = field(
        default=None,
        metadata={
            "help": "Restrict objects and predictions to a common vocabulary: a file with one word per line "
            "(LAMA's common_vocab_cased.txt), a ParaRel trex_lms_vocab folder, or 'pararel' for "
            "<data_dir>/pararel/trex_lms_vocab (the objects of its facts)."
        },
    )
    seen_fact_keys: str | None = field(
        default=None,
        metadata={
            "help": "TSV of the facts used in pre-training (sub_uri, predicate_id, obj_uri): results are also "
            "given for the seen and the held-out facts."
        },
    )
    top_k: list[int] = field(default_factory=lambda: [1, 10], metadata={"help": "The k of P@k (several allowed)."})
    batch_size: int = field(default=64, metadata={"help": "Queries per forward pass."})
    max_seq_length: int = field(default=128, metadata={"help": "Longest query in tokens (longer: truncated)."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer, if not the model's own."})
    device: str | None = field(default=None, metadata={"help": "cuda, cpu, ... (default: cuda when available)."})
    head_at_mask_only: bool = field(
        default=True,
        metadata={
            "help": "Apply the MLM head at the mask position only (same scores, much cheaper); "
            "--no_head_at_mask_only computes the full logits, for a model whose head is not per position."
        },
    )
    save_predictions: bool = field(default=False, metadata={"help": "Write predictions.jsonl (top-k per query)."})
    log_level: str = field(default="info", metadata={"help": "Logging level of the script and transformers."})
    disable_tqdm: bool = field(default=False, metadata={"help": "No progress bars."})

    def __post_init__(self):
        if not self.top_k or any(k < 1 for k in self.top_k):
            raise ValueError(f"--top_k needs positive integers, got {self.top_k}")
        if self.batch_size < 1:
            raise ValueError(f"--batch_size must be positive, got {self.batch_size}")


def setup_logging(level: str) -> None:
    """The run scripts' logging (``runtime.log_at``: no config dumps) at ``level``, this module's logger included."""
    numeric = logging.getLevelName(level.upper())
    runtime.log_at(numeric)
    logger.setLevel(numeric)


def load_masked_lm(model_args: ModelArguments, probe_args: ProbeArguments):
    """``(model, tokenizer, head report)``: the checkpoint through ``AutoModelForMaskedLM``; the report lists the
    head weights that were missing from it (newly initialised, so its predictions mean nothing)."""
    tokenizer = AutoTokenizer.from_pretrained(
        probe_args.tokenizer_name or model_args.model_name_or_path, **model_args.hub_kwargs()
    )
    model, info = AutoModelForMaskedLM.from_pretrained(
        model_args.model_name_or_path, output_loading_info=True, **model_args.hub_kwargs()
    )
    prefix = getattr(model, "base_model_prefix", "") + "."
    head_missing = sorted(k for k in info.get("missing_keys", []) if not k.startswith(prefix))
    report = {
        "newly_initialized": bool(head_missing),
        "missing_head_keys": head_missing,
        "missing_keys": len(info.get("missing_keys", [])),
    }
    if head_missing:
        logger.warning(
            "%s has no trained MLM head (%d head weights newly initialised: %s, ...): its P@k says "
            "nothing about its knowledge",
            model_args.model_name_or_path,
            len(head_missing),
            head_missing[0],
        )
    device = probe_args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device).eval(), tokenizer, report


def main(args: list[str] | None = None) -> dict:
    model_args, probe_args = parse_args((ModelArguments, ProbeArguments), args)
    setup_logging(probe_args.log_level)
    data = load_probe(
        probe_args.probe,
        probe_args.data_dir,
        probe_args.relations,
        probe_args.max_facts_per_relation,
        probe_args.templates_file,
    )
    if not data["facts"]:
        raise ValueError(f"probe {probe_args.probe!r}: no facts with templates for relations {probe_args.relations}")
    logger.info(
        "Probe %s: %d facts in %d relations; relations left out: %s",
        probe_args.probe,
        len(data["facts"]),
        len({f["relation"] for f in data["facts"]}),
        data["skipped_relations"] or "none",
    )
    common_vocab = probe_args.common_vocab
    if common_vocab == "pararel":
        common_vocab = os.path.join(probe_args.data_dir, "pararel", "trex_lms_vocab")
    words = read_common_vocab(common_vocab) if common_vocab else None
    seen = read_fact_keys(probe_args.seen_fact_keys) if probe_args.seen_fact_keys else None

    model, tokenizer, head = load_masked_lm(model_args, probe_args)
    results, records = probe(
        model,
        tokenizer,
        data["facts"],
        ks=sorted(set(probe_args.top_k)),
        batch_size=probe_args.batch_size,
        common_vocab=words,
        max_length=probe_args.max_seq_length,
        progress=not probe_args.disable_tqdm,
        seen_fact_keys=seen,
        head_at_mask_only=probe_args.head_at_mask_only,
    )
    results = {
        "model_name_or_path": model_args.model_name_or_path,
        "probe": probe_args.probe,
        "mlm_head": head,
        "common_vocab": probe_args.common_vocab,
        "skipped_relations": data["skipped_relations"],
        METRIC_UNIT_KEY: METRIC_UNIT,
        **results,
        "arguments": {k: v for k, v in asdict(probe_args).items() if k not in ("log_level", "disable_tqdm")},
    }
    for k in sorted(set(probe_args.top_k)):
        logger.info(
            "P@%d: %s macro over %d relations, %s micro over %d queries",
            k,
            _pct(results[f"precision_at_{k}"]),
            results["num_relations_scored"],
            _pct(results[f"precision_at_{k}_micro"]),
            results["num_queries_kept"],
        )
    logger.info("Skipped queries: %s", results["skipped"] or "none")

    os.makedirs(probe_args.output_dir, exist_ok=True)
    with open(os.path.join(probe_args.output_dir, "probe_results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2, ensure_ascii=False)
    with open(os.path.join(probe_args.output_dir, "probe_results.md"), "w", encoding="utf-8") as f:
        f.write(markdown_report(results, data["relation_labels"], sorted(set(probe_args.top_k))))
    if probe_args.save_predictions:
        with open(os.path.join(probe_args.output_dir, "predictions.jsonl"), "w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
    logger.info("Results in %s", probe_args.output_dir)
    return results


def _pct(value) -> str:
    return "n/a" if value is None else f"{value:.2f}%"  # P@k is in percent already


def results_to_markdown(results: dict, relation_labels: dict[str, str] | None = None, ks=(1, 10)) -> str:
    """A per-relation markdown table (facts, queries = facts x templates, queries kept, skips, P@k in %) with the
    macro and micro averages."""

    def line(cells, values) -> str:
        return "| " + " | ".join([*cells, *("–" if v is None else f"{v:.2f}" for v in values)]) + " |"

    labels = relation_labels or {}
    head = ["relation", "label", "facts", "queries", "kept", "multi-token skipped", "other skipped"]
    lines = [line(head + [f"P@{k}" for k in ks], []), "|" + "---|" * 2 + "---:|" * (len(head) + len(ks) - 2)]
    for relation, row in results["per_relation"].items():
        multi = row["skipped"].get("multi_token_object", 0)
        cells = [
            relation,
            labels.get(relation, ""),
            str(row["facts"]),
            str(row["queries"]),
            str(row["kept"]),
            str(multi),
            str(sum(row["skipped"].values()) - multi),
        ]
        lines.append(line(cells, [row.get(f"precision_at_{k}") for k in ks]))
    for name, suffix in (("macro (mean over relations)", ""), ("micro (mean over queries)", "_micro")):
        cells = [
            f"**{name}**",
            "",
            str(results["num_facts"]),
            str(results["num_queries"]),
            str(results["num_queries_kept"]),
            "",
            "",
        ]
        lines.append(line(cells, [results.get(f"precision_at_{k}{suffix}") for k in ks]))
    return "\n".join(lines) + "\n"


def markdown_report(results: dict, relation_labels: dict[str, str], ks: list[int]) -> str:
    """The per-relation table with a header naming the model, the probe, the skips and the head warning."""
    lines = [f"# Probe `{results['probe']}` of `{results['model_name_or_path']}`", ""]
    if results["mlm_head"]["newly_initialized"]:
        lines += ["**Warning:** the checkpoint has no trained MLM head (newly initialised); P@k is meaningless.", ""]
    lines += [
        f"{results['num_facts']} facts, {results['num_queries']} queries, {results['num_queries_kept']} "
        f"scored; skipped queries: {results['skipped'] or 'none'}; relations left out: "
        f"{results['skipped_relations'] or 'none'}. P@k in %, macro = mean over relations.",
        "",
    ]
    lines.append(results_to_markdown(results, relation_labels, ks))
    for name, subset in results.get("subsets", {}).items():
        if isinstance(subset, dict):
            cells = ", ".join(f"P@{k} {_pct(subset.get(f'precision_at_{k}'))}" for k in ks)
            lines.append(f"- {name}: {subset['num_facts']} facts, {subset['num_queries_kept']} scored; {cells}")
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    transformers.utils.logging.enable_explicit_format()
    main()
    runtime.end_distributed_run()
