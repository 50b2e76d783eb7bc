"""LAMA-style probing of a masked LM (Petroni et al., 2019; TRELM section 4): P@k of its top-k predictions.

The queries and the forward passes come from :mod:`keplm.data.lama` (:func:`~keplm.data.lama.build_queries`,
:func:`~keplm.data.lama.predict_top_k`); ``keplm.training.metrics.precision_at_k`` scores them: P@k
macro-averaged over relations (LAMA's "mean P@1"), micro and per relation, per template where a relation has several,
and on the seen and held-out facts of a pre-training corpus. P@k is reported in percent, as every keplm run metric
(:mod:`keplm.metric_units`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence

from keplm.data.lama import SKIP_REASONS, build_queries, common_vocab_ids, fact_key, predict_top_k
from keplm.metric_units import to_percent

from .metrics import precision_at_k

logger = logging.getLogger(__name__)


def score_queries(
    queries: Sequence[dict],
    top_ids: Sequence[Sequence[int]],
    tokenizer,
    ks: Sequence[int] = (1,),
    relation_keys: Sequence[str] | None = None,
) -> dict[str, float]:
    """P@k in percent for each k through ``precision_at_k`` (which computes fractions):
    ``precision_at_{k}`` (macro over relations), ``precision_at_{k}_micro`` and ``{relation}_precision_at_{k}``.
    ``relation_keys`` (one per query) groups by something else than the relation, e.g. relation and template."""
    if not queries:
        return {}
    predictions = [tokenizer.convert_ids_to_tokens(ids) for ids in top_ids]
    references = tokenizer.convert_ids_to_tokens([q["target_id"] for q in queries])
    relations = list(relation_keys) if relation_keys is not None else [q["relation"] for q in queries]
    result = {}
    for k in ks:
        result.update(precision_at_k(predictions, references, k=k, relations=relations))
    return to_percent(result)


def summarize(
    facts: Sequence[dict],
    queries: Sequence[dict],
    top_ids: Sequence[Sequence[int]],
    skips: Sequence[dict],
    tokenizer,
    ks: Sequence[int] = (1, 10),
    fact_indices: Iterable[int] | None = None,
) -> dict:
    """The probe's results: macro/micro P@k, counts (facts, queries, kept, skips by reason) and a per-relation
    table with P@k, and P@k per template where a relation has several (ParaRel). ``fact_indices`` restricts
    everything to those facts (e.g. the held-out ones) without running the model again."""
    if fact_indices is not None:
        keep = set(fact_indices)
        facts = [fact for i, fact in enumerate(facts) if i in keep]
        top_ids = [ids for q, ids in zip(queries, top_ids) if q["fact"] in keep]
        queries = [q for q in queries if q["fact"] in keep]
        skips = [skip for skip in skips if skip["fact"] in keep]
    skipped: dict[str, Counter] = {}
    for skip in skips:
        skipped.setdefault(skip["relation"], Counter())[skip["reason"]] += 1
    facts_per_relation = Counter(f["relation"] for f in facts)
    queries_per_relation = Counter()
    for fact in facts:
        queries_per_relation[fact["relation"]] += len(fact["templates"])
    scores = score_queries(queries, top_ids, tokenizer, ks)
    by_template = {}
    if any(len(f["templates"]) > 1 for f in facts):
        keys = [f"{q['relation']}\t{q['template']}" for q in queries]
        by_template = score_queries(queries, top_ids, tokenizer, ks, relation_keys=keys)
    kept = Counter(q["relation"] for q in queries)
    kept_facts = Counter(q["relation"] for q in {q["fact"]: q for q in queries}.values())
    per_relation = {}
    for relation in sorted(facts_per_relation, key=lambda r: int(r[1:]) if r[1:].isdigit() else 0):
        row = {
            "facts": facts_per_relation[relation],
            "queries": queries_per_relation[relation],
            "kept": kept[relation],
            "facts_kept": kept_facts[relation],
            "skipped": dict(sorted(skipped.get(relation, Counter()).items())),
            **{f"precision_at_{k}": scores.get(f"{relation}_precision_at_{k}") for k in ks},
        }
        templates = sorted({t for f in facts if f["relation"] == relation for t in f["templates"]})
        if by_template and len(templates) > 1:
            row["templates"] = {
                t: {f"precision_at_{k}": by_template.get(f"{relation}\t{t}_precision_at_{k}") for k in ks}
                for t in templates
            }
        per_relation[relation] = row
    totals = Counter(skip["reason"] for skip in skips)
    return {
        **{f"precision_at_{k}": scores.get(f"precision_at_{k}") for k in ks},
        **{f"precision_at_{k}_micro": scores.get(f"precision_at_{k}_micro") for k in ks},
        "num_relations": len(facts_per_relation),
        "num_relations_scored": len(kept),
        "num_facts": len(facts),
        "num_queries": sum(queries_per_relation.values()),
        "num_queries_kept": len(queries),
        "num_facts_kept": sum(kept_facts.values()),
        "skipped": {r: totals[r] for r in SKIP_REASONS if totals[r]},
        "per_relation": per_relation,
    }


def probe(
    model,
    tokenizer,
    facts: Sequence[dict],
    ks: Sequence[int] = (1, 10),
    batch_size: int = 32,
    common_vocab: Iterable[str] | None = None,
    max_length: int = 128,
    progress: bool = True,
    seen_fact_keys: Iterable[tuple[str, str, str]] | None = None,
    head_at_mask_only: bool = True,
) -> tuple[dict, list[dict]]:
    """Probe ``model`` (any ``AutoModelForMaskedLM``) on ``facts``: ``(results, predictions)`` with the results
    of :func:`summarize` and one record per scored query (relation, subject, object, template, top-k tokens).
    With ``seen_fact_keys`` (facts used in pre-training) ``results["subsets"]`` also holds the results of the
    ``seen`` and ``held_out`` facts and the number of facts without Wikidata ids (in neither subset)."""
    vocab = None
    if common_vocab is not None:
        vocab, dropped = common_vocab_ids(tokenizer, common_vocab)
        logger.info("Common vocabulary: %d tokens (%d words are not one token here)", len(vocab), dropped)
    queries, skips = build_queries(facts, tokenizer, vocab, max_length=max_length)
    if not queries:
        reasons = Counter(skip["reason"] for skip in skips)
        raise ValueError(
            f"none of the {len(facts)} facts gives a query this model can score: {dict(reasons)} (LAMA scores "
            "single-token objects: with another tokenizer most objects can split into several tokens)"
        )
    top_ids = predict_top_k(model, tokenizer, queries, max(ks), batch_size, vocab, progress, head_at_mask_only)
    results = summarize(facts, queries, top_ids, skips, tokenizer, ks)
    if vocab is not None:
        results["common_vocab_size"] = len(vocab)
    if seen_fact_keys is not None:
        seen_keys = set(map(tuple, seen_fact_keys))
        keys = [fact_key(fact) for fact in facts]
        results["subsets"] = {"facts_without_key": sum(key is None for key in keys)}
        for name, wanted in (("seen", True), ("held_out", False)):
            indices = [i for i, key in enumerate(keys) if key is not None and (key in seen_keys) == wanted]
            results["subsets"][name] = summarize(facts, queries, top_ids, skips, tokenizer, ks, indices)
    records = [
        {
            "relation": q["relation"],
            "sub_label": facts[q["fact"]]["sub_label"],
            "obj_label": facts[q["fact"]]["obj_label"],
            "template": q["template"],
            "target": tokenizer.convert_ids_to_tokens(q["target_id"]),
            "predictions": tokenizer.convert_ids_to_tokens(ids),
        }
        for q, ids in zip(queries, top_ids)
    ]
    return results, records


__all__ = ["score_queries", "summarize", "probe"]
