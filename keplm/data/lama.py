"""LAMA-style knowledge probing (Petroni et al., 2019; TRELM section 4): fact readers, cloze queries and P@k.

Readers (every fact is a plain dict, :func:`facts_to_dataset` makes a ``datasets.Dataset``)::

    {"relation": "P19", "sub_label": "Allan Peiper", "obj_label": "Alexandra", "sub_uri": "Q1886736",
     "obj_uri": "Q2643563", "uuid": "6a9d...", "templates": ["[X] was born in [Y] ."], "evidences": [...]}

* the LAMA T-REx probe (``lama/TREx/P*.jsonl``: Wikidata ids and evidence sentences) with the templates of
  ``lama/relations/relations.jsonl``; the AutoPrompt T-REx train/dev facts (``P*_{train,dev}.jsonl``, ids, no
  sentences); ParaRel (``pararel/trex_lms_vocab``: LAMA facts whose object is one word piece in bert-base-cased,
  roberta-base and albert-base-v2, labels only, with the paraphrased ``patterns/P*.jsonl``; ids are taken from
  the LAMA T-REx file with the same ``uuid`` where it exists).
* :func:`split_held_out`: facts seen in pre-training vs held out, by key ``(sub_uri, relation, obj_uri)``, so that
  probing can tell generalisation from memorisation (TRELM keeps held-out facts out of its corpus).

Queries (:func:`build_queries`): each template is filled with the subject for ``[X]`` and the tokenizer's mask token
for ``[Y]``; as in LAMA only objects that are one token of the model's vocabulary are scored, the others are skipped
and counted per relation and reason. :func:`predict_top_k` runs one forward pass per batch; the logits at the mask
position (optionally restricted to a common vocabulary) rank the candidates. Scoring them (P@k) is
:func:`keplm.training.probing.probe`'s.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import datasets
import torch
from torch.nn.utils.rnn import pad_sequence
from tqdm.auto import tqdm

from keplm.io_utils import iter_jsonl, open_text

logger = logging.getLogger(__name__)

PROBES = ("lama_trex", "pararel", "autoprompt_dev", "autoprompt_train")
#: why a query is not scored; every skip is counted per relation
SKIP_REASONS = ("multi_token_object", "object_not_in_vocab", "empty_object", "not_in_common_vocab", "truncated")
FACT_FEATURES = datasets.Features(
    {
        "relation": datasets.Value("string"),
        "sub_label": datasets.Value("string"),
        "obj_label": datasets.Value("string"),
        "sub_uri": datasets.Value("string"),
        "obj_uri": datasets.Value("string"),
        "uuid": datasets.Value("string"),
        "templates": [datasets.Value("string")],
        "evidences": [
            {
                "sub_surface": datasets.Value("string"),
                "obj_surface": datasets.Value("string"),
                "masked_sentence": datasets.Value("string"),
            }
        ],
    }
)
_PID_RE = re.compile(r"^(P\d+)")


# --------------------------------------------------------------------------- templates


def check_template(template: str, relation: str) -> None:
    """A cloze template needs ``[X]`` (the subject) and exactly one ``[Y]`` (the masked object); otherwise a
    ValueError naming the relation."""
    if not isinstance(template, str) or "[X]" not in template:
        raise ValueError(f"relation {relation}: template {template!r} has no [X] (subject) slot")
    if template.count("[Y]") != 1:
        raise ValueError(
            f"relation {relation}: template {template!r} needs exactly one [Y] (object) slot, "
            f"found {template.count('[Y]')}"
        )


def fill_template(template: str, subject: str, obj: str, relation: str = "?") -> str:
    """``template`` with ``[X]`` → ``subject`` and ``[Y]`` → ``obj`` (the mask token when probing)."""
    check_template(template, relation)
    return template.replace("[X]", subject).replace("[Y]", obj)


def read_templates(path: str | os.PathLike) -> tuple[dict[str, list[str]], dict[str, str]]:
    """``({relation: [templates]}, {relation: label})`` from LAMA's ``relations.jsonl`` (``relation``, ``template``,
    ``label``) or a ParaRel ``patterns`` folder (``P<id>.jsonl`` with one ``pattern`` per line). Every template is
    checked (:func:`check_template`)."""
    path = os.fspath(path)
    templates: dict[str, list[str]] = {}
    labels: dict[str, str] = {}
    if os.path.isdir(path):
        for file in _relation_files(path):
            relation = _PID_RE.match(os.path.basename(file)).group(1)
            for _, lineno, obj in iter_jsonl(file):
                if "pattern" not in obj:
                    raise ValueError(f"{file}:{lineno}: a ParaRel pattern line needs 'pattern'")
                templates.setdefault(relation, []).append(obj["pattern"])
    else:
        for _, lineno, obj in iter_jsonl(path):
            if not obj.get("relation") or "template" not in obj:
                raise ValueError(f"{path}:{lineno}: a relation line needs 'relation' and 'template'")
            templates.setdefault(str(obj["relation"]), []).append(obj["template"])
            if obj.get("label"):
                labels[str(obj["relation"])] = str(obj["label"])
    for relation, items in templates.items():
        for template in items:
            check_template(template, relation)
    return templates, labels


# --------------------------------------------------------------------------- fact readers


def _relation_files(directory: str, suffix: str | None = "") -> list[str]:
    """``P<id>{suffix}.jsonl(.gz)`` files of a folder sorted by relation number (``suffix=None``: any file whose
    name starts with ``P<id>``)."""
    found = []
    for name in os.listdir(directory):
        match = _PID_RE.match(name)
        if not match or not name.endswith((".jsonl", ".jsonl.gz")):
            continue
        if suffix is not None and name.split(".")[0] != match.group(1) + suffix:
            continue
        found.append((int(match.group(1)[1:]), name))
    return [os.path.join(directory, name) for _, name in sorted(found)]


def read_fact_file(path: str | os.PathLike, relation: str | None = None, limit: int | None = None) -> list[dict]:
    """Facts of one JSON-lines file (LAMA T-REx, AutoPrompt or ParaRel format, plain or .gz). The relation is the
    line's ``predicate_id``, else ``relation``, else the ``P<id>`` of the file name; ``sub_label`` and ``obj_label``
    are required. Templates are attached later (:func:`attach_templates`)."""
    path = os.fspath(path)
    match = _PID_RE.match(os.path.basename(path))
    default = relation or (match.group(1) if match else None)
    facts = []
    for _, lineno, obj in iter_jsonl(path):
        rel = obj.get("predicate_id") or obj.get("relation") or default
        if not rel or not obj.get("sub_label") or obj.get("obj_label") in (None, ""):
            raise ValueError(
                f"{path}:{lineno}: a fact needs sub_label, obj_label and a relation "
                "(predicate_id, or a P<id>.jsonl file name)"
            )
        facts.append(
            {
                "relation": str(rel),
                "sub_label": str(obj["sub_label"]),
                "obj_label": str(obj["obj_label"]),
                "sub_uri": obj.get("sub_uri"),
                "obj_uri": obj.get("obj_uri"),
                "uuid": obj.get("uuid"),
                "templates": [],
                "evidences": [
                    {k: e.get(k) for k in ("sub_surface", "obj_surface", "masked_sentence")}
                    for e in obj.get("evidences") or []
                ],
            }
        )
        if limit is not None and len(facts) >= limit:
            break
    return facts


def read_fact_files(
    paths: Iterable[str | os.PathLike],
    relations: Sequence[str] | None = None,
    max_facts_per_relation: int | None = None,
) -> list[dict]:
    """Facts of several files, keeping only ``relations`` (all when None) and the first
    ``max_facts_per_relation`` of each relation (file order)."""
    keep = set(relations) if relations else None
    facts, per_relation = [], Counter()
    for path in paths:
        match = _PID_RE.match(os.path.basename(os.fspath(path)))
        if keep is not None and match and match.group(1) not in keep:
            continue
        for fact in read_fact_file(path):
            if keep is not None and fact["relation"] not in keep:
                continue
            if max_facts_per_relation is not None and per_relation[fact["relation"]] >= max_facts_per_relation:
                continue
            per_relation[fact["relation"]] += 1
            facts.append(fact)
    return facts


def attach_templates(facts: list[dict], templates: dict[str, list[str]]) -> tuple[list[dict], dict[str, str]]:
    """Give each fact its relation's templates; facts of a relation without one are dropped and reported as
    ``{relation: "no template"}``."""
    kept, missing = [], {}
    for fact in facts:
        if templates.get(fact["relation"]):
            kept.append({**fact, "templates": list(templates[fact["relation"]])})
        else:
            missing[fact["relation"]] = "no template"
    return kept, missing


def attach_uris(facts: list[dict], reference: Iterable[dict]) -> int:
    """Fill missing ``sub_uri``/``obj_uri`` (ParaRel has labels only) from ``reference`` facts with the same
    ``uuid`` (LAMA T-REx); returns how many facts got them."""
    by_uuid = {f["uuid"]: f for f in reference if f.get("uuid")}
    filled = 0
    for fact in facts:
        ref = by_uuid.get(fact.get("uuid"))
        if ref is not None and not fact.get("sub_uri") and ref.get("sub_uri"):
            fact["sub_uri"], fact["obj_uri"] = ref["sub_uri"], ref["obj_uri"]
            filled += 1
    return filled


def load_probe(
    probe: str,
    data_dir: str | os.PathLike = "../shared/data",
    relations: Sequence[str] | None = None,
    max_facts_per_relation: int | None = None,
    templates_file: str | None = None,
) -> dict:
    """Facts and templates of a probe: a name in :data:`PROBES` (files under ``data_dir``) or a path (a folder of
    ``P*.jsonl(.gz)`` fact files or one such file). Returns ``{"name", "facts", "relation_labels",
    "skipped_relations"}``; ``templates_file`` (relations.jsonl or a ParaRel patterns folder) overrides the
    default templates (LAMA's ``relations.jsonl``; ParaRel's patterns for ``pararel``)."""
    lama = Path(data_dir, "lama")
    default_templates = lama_relations = lama / "relations" / "relations.jsonl"
    if probe == "lama_trex":
        files = _relation_files(lama / "TREx")
    elif probe in ("autoprompt_dev", "autoprompt_train"):
        files = _relation_files(lama / "autoprompt_trex_train_dev", "_" + probe.split("_")[1])
    elif probe == "pararel":
        files = _relation_files(Path(data_dir, "pararel", "trex_lms_vocab"))
        default_templates = Path(data_dir, "pararel", "patterns")
    elif os.path.isdir(probe):
        files = _relation_files(probe, None) or sorted(
            os.path.join(probe, n) for n in os.listdir(probe) if n.endswith((".jsonl", ".jsonl.gz"))
        )
    elif os.path.isfile(probe):
        files = [probe]
    else:
        raise ValueError(f"unknown probe {probe!r}: use one of {list(PROBES)}, a folder of P*.jsonl files or a file")
    if not files:
        raise FileNotFoundError(f"probe {probe!r}: no fact files found (data_dir={data_dir})")
    facts = read_fact_files(files, relations, max_facts_per_relation)
    templates, labels = read_templates(templates_file or default_templates)
    if probe == "pararel":
        if (lama / "TREx").is_dir():
            filled = attach_uris(facts, read_fact_files(_relation_files(lama / "TREx"), relations=relations))
            logger.info("ParaRel: Wikidata ids for %d of %d facts from the LAMA T-REx uuids", filled, len(facts))
        if not templates_file and lama_relations.is_file():
            labels = read_templates(lama_relations)[1]
    facts, skipped = attach_templates(facts, templates)
    if relations:
        skipped.update(
            {r: "no facts" for r in relations if not any(f["relation"] == r for f in facts) and r not in skipped}
        )
    return {"name": probe, "facts": facts, "relation_labels": labels, "skipped_relations": skipped}


def facts_to_dataset(facts: Sequence[dict]) -> datasets.Dataset:
    """The facts as a ``datasets.Dataset`` with :data:`FACT_FEATURES` (missing ids as None)."""
    columns = {name: [fact.get(name) for fact in facts] for name in FACT_FEATURES}
    columns["templates"] = [list(t or []) for t in columns["templates"]]
    columns["evidences"] = [list(e or []) for e in columns["evidences"]]
    return datasets.Dataset.from_dict(columns, features=FACT_FEATURES)


# --------------------------------------------------------------------------- seen / held-out facts


def fact_key(fact: dict) -> tuple[str, str, str] | None:
    """``(sub_uri, relation, obj_uri)``, or None when the fact has no Wikidata ids."""
    if not fact.get("sub_uri") or not fact.get("obj_uri"):
        return None
    return str(fact["sub_uri"]), str(fact["relation"]), str(fact["obj_uri"])


def read_fact_keys(path: str | os.PathLike) -> set[tuple[str, str, str]]:
    """Fact keys from a TSV file (``sub_uri<TAB>predicate_id<TAB>obj_uri`` per line, ``#`` comments, plain or
    .gz), e.g. the facts whose sentences entered pre-training."""
    keys = set()
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3 or not all(parts):
                raise ValueError(f"{path}:{lineno}: expected sub_uri<TAB>predicate_id<TAB>obj_uri")
            keys.add(tuple(parts))
    return keys


def write_fact_keys(path: str | os.PathLike, keys: Iterable[tuple[str, str, str]]) -> None:
    """Write fact keys in :func:`read_fact_keys`'s format, sorted."""
    with open_text(path, "wt") as f:
        f.write("# sub_uri\tpredicate_id\tobj_uri\n")
        for key in sorted(set(map(tuple, keys))):
            f.write("\t".join(key) + "\n")


def split_held_out(
    facts: Sequence[dict], seen_keys: Iterable[tuple[str, str, str]], missing: str = "error"
) -> tuple[list[dict], list[dict], list[dict]]:
    """``(seen, held_out, without_key)``: facts whose key is in ``seen_keys`` (used in pre-training) and the
    rest. Facts without Wikidata ids raise a ValueError (``missing="error"``) or are returned apart
    (``missing="keep_apart"``)."""
    if missing not in ("error", "keep_apart"):
        raise ValueError(f"split_held_out: missing must be 'error' or 'keep_apart', got {missing!r}")
    seen_keys = set(map(tuple, seen_keys))
    seen, held_out, without = [], [], []
    for fact in facts:
        key = fact_key(fact)
        (without if key is None else seen if key in seen_keys else held_out).append(fact)
    if without and missing == "error":
        raise ValueError(
            f"split_held_out: {len(without)} facts have no sub_uri/obj_uri (first: "
            f"{without[0]['relation']} {without[0]['sub_label']!r}); pass missing='keep_apart'"
        )
    return seen, held_out, without


# --------------------------------------------------------------------------- probing


def object_token_id(tokenizer, obj_label: str, leading_space: bool = True) -> tuple[int | None, str | None]:
    """``(token id, None)`` when ``obj_label`` is one token of the vocabulary, else ``(None, reason)``.
    ``leading_space``: the object follows a space in the sentence (byte-level BPE marks it, WordPiece ignores it)."""
    ids = tokenizer((" " if leading_space else "") + obj_label, add_special_tokens=False)["input_ids"]
    if not ids:
        return None, "empty_object"
    if len(ids) > 1:
        return None, "multi_token_object"
    if tokenizer.unk_token_id is not None and ids[0] == tokenizer.unk_token_id:
        return None, "object_not_in_vocab"
    return ids[0], None


def common_vocab_ids(tokenizer, words: Iterable[str]) -> tuple[list[int], int]:
    """Token ids of the single-token ``words`` of a common vocabulary, and how many words were not one token."""
    found = [object_token_id(tokenizer, word)[0] for word in words]
    return sorted({token_id for token_id in found if token_id is not None}), found.count(None)


def read_common_vocab(path: str | os.PathLike) -> list[str]:
    """A common vocabulary: one word per line (LAMA's ``common_vocab_cased.txt`` format), or a ParaRel
    ``trex_lms_vocab`` folder, whose facts' objects (single word pieces in BERT, RoBERTa and ALBERT) are taken."""
    if os.path.isdir(path):
        return sorted({f["obj_label"] for f in read_fact_files(_relation_files(os.fspath(path)))})
    with open_text(path) as f:
        return [line.strip() for line in f if line.strip()]


def build_queries(
    facts: Sequence[dict], tokenizer, vocab_ids: Iterable[int] | None = None, max_length: int = 128
) -> tuple[list[dict], list[dict]]:
    """One query per (fact, template): ``{"fact", "relation", "template", "input_ids", "target_id"}`` (``fact``:
    the fact's index), and one ``{"fact", "relation", "template", "reason"}`` per query dropped (reasons in
    :data:`SKIP_REASONS`: object not one token, not in ``vocab_ids``, the mask cut by truncation or a second mask
    token in the subject)."""
    if tokenizer.mask_token is None:
        raise ValueError(f"{type(tokenizer).__name__} has no mask token: probing needs a masked-LM tokenizer")
    allowed = set(vocab_ids) if vocab_ids is not None else None
    candidates, skips, cache = [], [], {}
    for index, fact in enumerate(facts):
        for template in fact["templates"]:
            check_template(template, fact["relation"])
            y = template.index("[Y]")
            leading_space = y > 0 and template[y - 1].isspace()
            key = (fact["obj_label"], leading_space)
            if key not in cache:
                cache[key] = object_token_id(tokenizer, fact["obj_label"], leading_space)
            target, reason = cache[key]
            if target is not None and allowed is not None and target not in allowed:
                reason = "not_in_common_vocab"
            query = {"fact": index, "relation": fact["relation"], "template": template}
            if reason is not None:
                skips.append({**query, "reason": reason})
                continue
            text = fill_template(template, fact["sub_label"], tokenizer.mask_token, fact["relation"])
            candidates.append((query, text, target))
    if not candidates:  # every query skipped (the tokenizer refuses an empty batch)
        return [], skips
    encoded = tokenizer([text for _, text, _ in candidates], truncation=True, max_length=max_length)["input_ids"]
    queries = []
    for (query, text, target), ids in zip(candidates, encoded):
        if ids.count(tokenizer.mask_token_id) != 1:
            skips.append({**query, "reason": "truncated"})
            continue
        queries.append({**query, "text": text, "target_id": target, "input_ids": ids})
    return queries, skips


@torch.no_grad()
def predict_top_k(
    model,
    tokenizer,
    queries: Sequence[dict],
    top_k: int = 10,
    batch_size: int = 32,
    vocab_ids: Sequence[int] | None = None,
    progress: bool = True,
    head_at_mask_only: bool = True,
) -> list[list[int]]:
    """The ``top_k`` token ids at the mask position of each query, best first: one forward pass per batch of
    ``AutoModelForMaskedLM`` (as ``pipeline("fill-mask")`` scores, without its per-example overhead); with
    ``vocab_ids`` only those tokens compete (LAMA's common vocabulary). ``head_at_mask_only``: the MLM head (a
    vocabulary-sized product per position, most of the cost of a small encoder) is applied at the mask position
    only, through a hook on ``model.base_model``; a model whose head ignores it gets the full logits as before."""
    model.eval()
    device = next(model.parameters()).device
    size = min(model.get_output_embeddings().out_features, len(tokenizer))  # no padded, token-less rows
    restrict = None
    if vocab_ids is not None:
        restrict = torch.full((size,), float("-inf"), device=device)
        restrict[torch.as_tensor(list(vocab_ids), device=device)] = 0.0
        top_k = min(top_k, len(vocab_ids))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    positions = {}

    def mask_states_only(module, args, output):  # one mask per query: its hidden state is all the head needs
        hidden = output[0] if isinstance(output, (tuple, dict)) else None
        if hidden is None or hidden.dim() != 3 or hidden.shape[:2] != positions["shape"]:
            return output  # not the (batch, length, hidden) states of this batch: the head sees everything
        picked = hidden[positions["rows"], positions["cols"]].unsqueeze(1)
        if isinstance(output, tuple):
            return (picked, *output[1:])
        output["last_hidden_state"] = picked
        return output

    hooked = head_at_mask_only and model.base_model is not model
    hook = model.base_model.register_forward_hook(mask_states_only) if hooked else None
    order = sorted(range(len(queries)), key=lambda i: len(queries[i]["input_ids"]))  # less padding
    results: list[list[int]] = [[] for _ in queries]
    try:
        for start in tqdm(range(0, len(order), batch_size), desc="Probing", disable=not progress, unit="batch"):
            batch_index = order[start : start + batch_size]
            rows_ids = [torch.tensor(queries[i]["input_ids"]) for i in batch_index]
            # right padding: the encoder's positions start at 0
            input_ids = pad_sequence(rows_ids, batch_first=True, padding_value=pad_id).to(device)
            attention_mask = pad_sequence([torch.ones_like(ids) for ids in rows_ids], batch_first=True).to(device)
            rows, cols = (input_ids == tokenizer.mask_token_id).nonzero(as_tuple=True)
            positions.update(rows=rows, cols=cols, shape=input_ids.shape)
            logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
            scores = (logits[:, 0] if logits.shape[1] == 1 else logits[rows, cols])[:, :size].float()
            if restrict is not None:
                scores = scores + restrict
            for i, ids in zip(batch_index, scores.topk(min(top_k, size), dim=-1).indices.tolist()):
                results[i] = ids
    finally:
        if hook is not None:
            hook.remove()
    return results


__all__ = [
    "PROBES",
    "SKIP_REASONS",
    "FACT_FEATURES",
    "check_template",
    "fill_template",
    "read_templates",
    "read_fact_file",
    "read_fact_files",
    "attach_templates",
    "attach_uris",
    "load_probe",
    "facts_to_dataset",
    "fact_key",
    "read_fact_keys",
    "write_fact_keys",
    "split_held_out",
    "object_token_id",
    "common_vocab_ids",
    "read_common_vocab",
    "build_queries",
    "predict_top_k",
]
